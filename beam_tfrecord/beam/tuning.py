"""``WriterTuning``: how the writer runs, never what it writes (Beam-free: importable without Beam).

Invariant: no field changes a byte of the published dataset (``tests/test_determinism.py`` and the
per-knob tests check each). docs/inputs.md shows it in use; docs/performance.md has the figures.
"""

from __future__ import annotations

import dataclasses
import enum

from beam_tfrecord.core.moved_keywords import refuses_moved_keywords
from beam_tfrecord.core.pieces import DEFAULT_MIN_PIECE_BYTES, ShardWriters
from beam_tfrecord.core.units import KiB
from beam_tfrecord.errors import WriterOptionError
from beam_tfrecord.spill.run_files import DEFAULT_RUN_BYTES

# File-backed records this large go from their files straight into their shards (their payload written
# once); smaller ones are spilled with the rest (docs/performance.md, "Payload written once").
DEFAULT_REREAD_MIN_BYTES = 64 * KiB


class FanIn(enum.Enum):
    """How a shard's records come together.

    SPILL: workers spill hash-sorted runs to storage (the dataset's temp folder, which every
        worker reaches, as it must for the shards); each shard writer merges its slice of every
        run. No payload byte goes through the runner's shuffle, so memory stays bounded by the run
        size on any runner: for runners whose shuffle holds data in memory (the DirectRunner,
        Prism, the portable runner's embedded job service, Dask). A shard larger than its share of
        the writers is written in pieces and joined (``shard_writers``; same bytes).
    SHUFFLE: records keyed by shard go through the runner's disk-backed shuffle (Dataflow Shuffle,
        Flink's and Spark's sort-based shuffles); a shard writer reads one group (one writer per
        shard, never pieces: the group is the shard's records).
    AUTO: SPILL on runners whose shuffle is in memory, SHUFFLE on every other (the job summary
        says which ran, and why).
    """

    AUTO = "auto"
    SPILL = "spill"
    SHUFFLE = "shuffle"

    @classmethod
    def parse(cls, text: str) -> FanIn:
        try:
            return cls(text.strip().lower())
        except ValueError as err:
            raise WriterOptionError(f"fan_in must be one of {[m.value for m in cls]}, got {text!r}") from err


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WriterOptionError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise WriterOptionError(f"{name} must be >= {minimum}, got {value!r}")


@refuses_moved_keywords({"statistics": "DatasetDescription(statistics=...)"})
@dataclasses.dataclass(frozen=True)
class WriterTuning:
    """How ``WriteTFRecordDataset`` and ``WriteBalancedTFRecord`` run: memory, processes, I/O, temp files.

    Every field leaves the dataset byte for byte as it is; only time, memory and disk use change.

    Attributes:
        spill_run_bytes: encoded records a worker holds before it writes them as a sorted run to the
            temp folder (up to twice this while a run is written). Spill fan-in only.
        reread_min_bytes: file-backed records at least this large are read from their files again
            by the shard writer (and checked against the planned size) instead of spilled; 0 spills
            everything. Not used with ``feature_transforms``.
        direct_io: spill runs and shards on a local disk may bypass the page cache (``O_DIRECT``) where
            the filesystem allows it; False: every file through the page cache.
        fan_in: how a shard's records come together (``FanIn``; AUTO chooses from the runner).
        local_workers: DirectRunner worker processes when the pipeline's options leave Beam's one
            in-memory worker: None for one per core (or ``$BEAM_TFRECORD_LOCAL_WORKERS``), 1 leaves
            the runner as it is. Options that set the parallelism, or another runner, win.
        encode_processes: processes that encode samples inside one runner worker (spill fan-in),
            for a pipeline that must stay in one process; 1: none. Needs workers on this machine.
        shard_writers: the spill fan-in writes a shard larger than ``1 / shard_writers`` of the data
            in pieces, in parallel, then joins them; 1: one writer per shard (best on one local disk).
            Uncompressed TFRecord shards only; others are written whole.
        min_piece_bytes: no shard is cut into pieces smaller than this.
        temp_dir: where runs and unpublished shards go (None: a hidden folder in ``output_dir``). On
            another filesystem the shards are copied into place when published instead of renamed.
        shared_filesystem: local ``output_dir`` and ``temp_dir`` are mounted by every worker at the
            same path (NFS, a mounted bucket). Without it, a runner whose workers may run on other
            machines refuses local paths with ``LocalPathError`` when the pipeline is built.
        progress_dir: a local folder where the workers keep their counts for a live progress
            display (what the jobs' ``--progress`` shows); only for workers on this machine.

    Raises:
        WriterOptionError: at construction, naming the field and the bad value.
    """

    spill_run_bytes: int = DEFAULT_RUN_BYTES
    reread_min_bytes: int = DEFAULT_REREAD_MIN_BYTES
    direct_io: bool = True
    fan_in: FanIn = FanIn.AUTO
    local_workers: int | None = None
    encode_processes: int = 1
    shard_writers: int = 1
    min_piece_bytes: int = DEFAULT_MIN_PIECE_BYTES
    temp_dir: str | None = None
    shared_filesystem: bool = False
    progress_dir: str | None = None

    def __post_init__(self) -> None:
        for name, minimum in (("spill_run_bytes", 1), ("reread_min_bytes", 0), ("encode_processes", 1),
                              ("shard_writers", 1), ("min_piece_bytes", 1)):
            _require_int(name, getattr(self, name), minimum)
        if self.local_workers is not None:
            _require_int("local_workers", self.local_workers, 1)
        if not isinstance(self.fan_in, FanIn):
            raise WriterOptionError(f"fan_in must be a FanIn, got {self.fan_in!r}")
        for name in ("direct_io", "shared_filesystem"):
            if not isinstance(getattr(self, name), bool):
                raise WriterOptionError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("temp_dir", "progress_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise WriterOptionError(f"{name} must be a directory path or None, got {value!r}")

    @property
    def shard_phase(self) -> ShardWriters:
        """The spill fan-in's shard phase: its writers and smallest piece."""
        return ShardWriters(self.shard_writers, self.min_piece_bytes)
