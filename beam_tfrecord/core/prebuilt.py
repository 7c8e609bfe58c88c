"""PrebuiltRecord: a record already serialized, given to the writer in place of a sample.

An incremental refresh keeps the records of unchanged inputs from the version it starts from
(``beam_tfrecord.versions.incremental``): it hands them to ``WriteTFRecordDataset`` as ``PrebuiltRecord``s
beside the ``Sample``s of new and changed inputs. The writer hashes the key (so the record keeps
its split and its place in the hash order) and writes the bytes as they are: no file is read, no
transform runs, the schema is not checked again. The caller vouches that the bytes were written
for this schema; only the hard shard-size cap is checked.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PrebuiltRecord:
    """One serialized record and the key of the input it was made from.

    Attributes:
        key: the sample key it was built from (hashed with the dataset's salt, like a sample's).
        record: the serialized record, without TFRecord framing.
    """

    key: str
    record: bytes
