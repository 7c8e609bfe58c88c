"""A build that a test kills and resumes: ``python tests/resume/resume_job.py OUT [--resume] [--shards] [--small]``.

400 samples of 20 KB of seeded random bytes, encoded through a transform that sleeps 10 ms each (so a
kill lands mid-encoding), spilled in runs of about 200 KB: ~40 runs, in shards of about 1 MB. With
``--shards`` the encoding does not sleep and the shards are about 100 KB (~80 of them, written in turn
by one worker), so a kill lands in the shard phase. With ``--pieces`` the encoding does not sleep and each split
is one shard; the train shard (~7 MB) is written in two pieces (``shard_writers=2``, in turn by the one worker)
and joined, so a kill lands while pieces are written or joined. ``--small``: the first 100 samples (~10 runs, 2
shards), for object stores, where each request costs. Prints the published manifest's ``metadata.resumed``
as JSON (``{}`` for a clean build).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import apache_beam as beam
import numpy as np

from beam_tfrecord import (
    DType,
    Schema,
    ShardingConfig,
    SplitConfig,
    WriterProvenance,
    WriterTuning,
    WriteTFRecordDataset,
)
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import Scalar
from beam_tfrecord.engine.local_engine import LocalBatchRunner

NUM_SAMPLES = 400
SMALL_SAMPLES = 100
SAMPLE_BYTES = 20_000
SCHEMA = Schema({"payload": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})


@dataclasses.dataclass(frozen=True)
class Slowly:
    """An identity transform that takes ``seconds`` (its repr, and so the build's fingerprint, is stable)."""

    seconds: float

    def __call__(self, value):
        time.sleep(self.seconds)
        return value


def sample(index: int) -> Sample:
    """Sample ``index``, made in the pipeline: 8 MB given to ``beam.Create`` were pickled and bz2-compressed
    into the pipeline (~25 s of a 45 s build at load 12)."""
    payload = np.random.default_rng((7, index)).bytes(SAMPLE_BYTES)
    return Sample(f"s/{index:05d}", {"payload": payload, "index": index})


SHARD_PHASE_BYTES = 100_000  # the shard size of the builds killed in their shard phase
PIECES_SHARD_BYTES = 100_000_000  # one shard per split: the builds killed while writing or joining pieces


def build(out: str, *, resume: bool, seconds: float = 0.01, shard_bytes: int = 1_000_000,
          shard_writers: int = 1, num_samples: int = NUM_SAMPLES) -> dict:
    writer = WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse("train=0.9,test=0.1"),
                                  sharding=ShardingConfig(target_shard_bytes=shard_bytes),
                                  feature_transforms={"payload": Slowly(seconds)},
                                  provenance=WriterProvenance(inputs_identity="seed-7", resume=resume),
                                  tuning=WriterTuning(spill_run_bytes=200_000, local_workers=1,
                                                      shard_writers=shard_writers, min_piece_bytes=1 << 20))
    with beam.Pipeline(runner=LocalBatchRunner()) as pipeline:
        _ = pipeline | beam.Create(range(num_samples), reshuffle=False) | beam.Map(sample) | writer
    from beam_tfrecord import load_manifest

    return dict(load_manifest(out).metadata.get("resumed", {}))


if __name__ == "__main__":
    shards, pieces = "--shards" in sys.argv[2:], "--pieces" in sys.argv[2:]
    print(json.dumps(build(sys.argv[1], resume="--resume" in sys.argv[2:], seconds=0.0 if shards or pieces else 0.01,
                           shard_bytes=SHARD_PHASE_BYTES if shards else PIECES_SHARD_BYTES if pieces else 1_000_000,
                           shard_writers=2 if pieces else 1,
                           num_samples=SMALL_SAMPLES if "--small" in sys.argv[2:] else NUM_SAMPLES)))
