"""PrebuiltRecord: a record already serialized, given to the writer in place of a sample (incremental refresh).

The writer hashes its key and writes its bytes as they are; the caller vouches they fit the schema.
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
