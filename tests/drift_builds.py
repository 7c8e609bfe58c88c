"""Two real builds with drift planted between them (issue 50): a numeric feature shifted by 3 standard
deviations, and an optional one (a variable-length list of at most one value) absent from half the records.

Shared by the DirectRunner test (tests/statistics) and the Dask one (tests/dask).
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import DType, Sample, Scalar, Schema, SplitConfig, VarList, WriterTuning, WriteTFRecordDataset
from beam_tfrecord.core import proto
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.formats import shard_format

SCHEMA = Schema({"x": Scalar(DType.FLOAT32), "y": VarList(DType.FLOAT32)})
RECORDS = 1000


def samples(*, shift: float = 0.0, absent_every: int = 0) -> list[Sample]:
    """``RECORDS`` samples: ``x`` drawn from N(shift, 1); ``y`` one value from N(0, 1), absent from every
    ``absent_every``-th sample (none with 0)."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(shift, 1.0, RECORDS), rng.normal(0.0, 1.0, RECORDS)
    return [Sample(f"r{i:05d}", {"x": float(x[i])} if absent_every and i % absent_every == 0
                   else {"x": float(x[i]), "y": [float(y[i])]}) for i in range(RECORDS)]


def build(out: str, records: list[Sample], *options: str) -> str:
    """``records`` written to ``out`` as one split, on the runner ``options`` name (the DirectRunner without)."""
    tuning = WriterTuning(shared_filesystem=True) if options else None
    with beam.Pipeline(options=PipelineOptions(list(options))) as pipeline:
        _ = (pipeline | beam.Create(records)
             | WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse("train=1.0"), tuning=tuning))
    return out


def absent(dataset_dir: str, feature: str) -> int:
    """Records without ``feature``, counted from the shards with the protobuf library (not the statistics)."""
    manifest = open_dataset(dataset_dir).manifest
    count = 0
    for shard in manifest.shards:
        with shard_format(manifest.file_format).open_reader(f"{dataset_dir}/{shard.filename}", shard,
                                                            compression=manifest.compression) as reader:
            for record, _ in reader.iter_records(0, shard.num_records):
                count += feature not in proto.Example.FromString(bytes(record)).features.feature
    return count
