"""Options shared by every dataset-building job, and the one way they become a writer."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.beam.encode_pool import describe_encode_processes
from beam_tfrecord.beam.shard_pieces import describe_pieces
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.beam.write_options import WriterChecks, WriterProvenance
from beam_tfrecord.core.description import DEFAULT_DATASET_NAME, DEFAULT_SALT, DatasetDescription
from beam_tfrecord.core.file_format import DEFAULT_FILE_FORMAT, Compression, FileFormat
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import DEFAULT_TARGET_SHARD_BYTES, ShardingConfig, SplitConfig
from beam_tfrecord.core.units import MiB
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.describe import describe_manifest as describe
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.engine.dask_cluster import local_cluster_for
from beam_tfrecord.engine.local_engine import job_runner_for
from beam_tfrecord.engine.local_workers import (
    WORKER_LOG_RELAY,
    InputSize,
    LocalWorkersChoice,
    available_cores,
    choose_local_workers,
    local_workers_of,
    quiet_worker_start_up,
)
from beam_tfrecord.engine.table import (
    runner_name_of,
    runs_on_direct_runner,
)
from beam_tfrecord.engine.worker_placement import remote_workers_reason, require_shared_paths, workers_probe
from beam_tfrecord.errors import MAX_REJECTED_FLAG, BeamTFRecordError, DiskFullError
from beam_tfrecord.job import lease
from beam_tfrecord.quality.content import DuplicatesCheck
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.quality.split_groups import SplitKeyFn
from beam_tfrecord.spill.resume import SkipsReusedKeys, describe_reused_shards
from beam_tfrecord.spill.run_files import DEFAULT_RUN_BYTES
from beam_tfrecord.versions.commit import VersionCommit
from beam_tfrecord.versions.refresh import InputFingerprint, fingerprint_inputs
from pipelines.dry_run import check_dry_run, end_if_dry_run
from pipelines.job_options import JobCommand
from pipelines.progress_options import ProgressOptions as ProgressOptions  # the jobs import it from here too
from pipelines.progress_options import progress_for
from pipelines.source_options import parse_bool


class DatasetOutputOptions(PipelineOptions):
    """Where and how the dataset is written (every job takes these)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--output", help="dataset directory to write (local path or gs://bucket/dir)")
        parser.add_argument("--dataset_name", default=DEFAULT_DATASET_NAME, help="name used in shard file names")
        parser.add_argument("--splits", default="train=1.0",
                            help="NAME=FRACTION,... (stable by key hash) or NAME=COUNT,...,NAME=* (exact counts)")
        parser.add_argument("--target_shard_bytes", type=int, default=DEFAULT_TARGET_SHARD_BYTES,
                            help="aim for shards of this many uncompressed bytes")
        parser.add_argument("--max_shard_bytes", type=int, default=None,
                            help="hard cap on a shard's uncompressed bytes (default: 2 x target)")
        parser.add_argument("--num_shards", type=int, default=None,
                            help="exactly this many shards per split instead of sizing by target; those the "
                                 "records cannot fill are empty files (the summary says so)")
        parser.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"],
                            help="shard compression (tfrecord only)")
        parser.add_argument("--file_format", default=DEFAULT_FILE_FORMAT.value, choices=[f.value for f in FileFormat],
                            help="tfrecord (sequential) or array_record (random access by index: global "
                                 "shuffles, Grain, TFDS as_data_source; needs the array-record package)")
        parser.add_argument("--dali_index", type=parse_bool, nargs="?", const=True, default=False,
                            help="also write each shard's NVIDIA DALI index (<shard>.idx, listed in the manifest) so "
                                 "DALI's fn.readers.tfrecord reads the dataset without running tfrecord2idx "
                                 "(uncompressed tfrecord shards only)")
        parser.add_argument("--no_statistics", type=parse_bool, nargs="?", const=True, default=False,
                            help="write no statistics.pb (feature statistics as TFDV writes them; same shards)")
        parser.add_argument("--salt", default=DEFAULT_SALT, help="hash salt for split assignment and order")
        parser.add_argument("--max_rejected_fraction", type=float, default=0.0,
                            help="publish anyway if at most this fraction of samples is rejected")
        parser.add_argument("--spill_run_mib", type=int, default=DEFAULT_RUN_BYTES // MiB,
                            help="MiB of encoded records a worker buffers before spilling a sorted run")
        parser.add_argument("--break_lock", type=parse_bool, nargs="?", const=True, default=False,
                            help="take over the output's lease even if another job seems to hold it (only when "
                                 "that job is known to be dead; --break_lock or --break_lock=true)")
        parser.add_argument("--encode_processes", type=int, default=1,
                            help="a pool of N processes that encode samples inside the runner's worker (default 1: "
                                 "none). Every core is used without it: on the DirectRunner the job runs one worker "
                                 f"process per core ({available_cores()} here, or $BEAM_TFRECORD_LOCAL_WORKERS) unless "
                                 "--direct_num_workers or --direct_running_mode is given (--direct_num_workers=1: one "
                                 "in-memory worker)")
        parser.add_argument("--shard_writers", type=int, default=None,
                            help="writers the spill fan-in's shard phase keeps busy: a shard larger than its share "
                                 "is written in pieces and joined, same bytes (default 1: one writer per shard, "
                                 "faster where the shard phase is bound by the disk)")
        parser.add_argument("--fan_in", default="auto", choices=[f.value for f in FanIn],
                            help="how a shard's records come together: spill (sorted runs in the output's temp "
                                 "folder, merged by each shard writer; auto picks it where the runner's shuffle "
                                 "holds data in memory: DirectRunner, Prism, embedded portable runner, Dask), "
                                 "shuffle (the runner's shuffle keyed by shard; auto picks it on Dataflow, Flink, "
                                 "Spark) or auto (chosen from the runner; the job summary says which and why)")
        parser.add_argument("--resume", type=parse_bool, nargs="?", const=True, default=False,
                            help="resume a killed build of the same inputs and options in --output: keep the "
                                 "spill runs it finished, encode only the rest (byte-identical to a clean build; "
                                 "refused if the inputs or options changed; spill fan-in only)")
        parser.add_argument("--shared_filesystem", type=parse_bool, nargs="?", const=True, default=False,
                            help="local paths (--input, --output...) are on a filesystem every worker mounts at "
                                 "the same path (NFS, a bucket mounted with gcsfuse). Without it, a runner whose "
                                 "workers may run on other machines (Dataflow, Flink, Spark, a Dask scheduler "
                                 "given by address, the PortableRunner not in LOOPBACK) refuses local paths "
                                 "before any work starts")


_SECRET_WORDS = ("token", "secret", "password", "passwd", "credential", "api_key", "private_key")


def redact_command(argv: Sequence[str]) -> tuple[str, ...]:
    """The command line with the value of any option that looks secret replaced by ``<redacted>``.

    The manifest records the command that produced a dataset; credentials never belong there.
    """
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        secret = arg.startswith("-") and any(word in name.lower() for word in _SECRET_WORDS)
        if secret and eq:
            out.append(f"{name}=<redacted>")
        else:
            out.append(arg)
            hide_next = secret
    return tuple(out)


def parse_job(command: JobCommand, argv: Sequence[str] | None, *,
              prog: str | None) -> tuple[PipelineOptions, list[str]]:
    """A job's options from its command line (the process's arguments when ``argv`` is None), and
    the arguments as given (what the manifest records). See ``JobCommand.parse`` for the exits."""
    args = list(sys.argv[1:] if argv is None else argv)
    return command.parse(args, prog=prog), args


def require_output(options: DatasetOutputOptions) -> str:
    """``--output``, which every job needs."""
    if not options.output:
        raise SystemExit("--output is required (a local directory or gs://bucket/dir)")
    return options.output


def require_worker_paths(options: PipelineOptions, inputs: Mapping[str, str | None]) -> bool:
    """A job's first step: refuses a local path among ``inputs`` (option name -> path) and ``--output``
    that the runner's workers may not see (``beam_tfrecord.engine.worker_placement``), before anything
    is listed or run; returns whether the workers see this machine's local paths (they run here,
    ``--shared_filesystem`` says they mount them, or a Dask cluster's workers showed they do): the
    writer's ``shared_filesystem``.

    Raises:
        LocalPathError: naming the option, the path, the runner and the fixes.
    """
    output = options.view_as(DatasetOutputOptions)
    runner = runner_name_of(options)
    return require_shared_paths({**inputs, "--output": output.output},
                                remote_reason=remote_workers_reason(runner, options),
                                shared_filesystem=bool(output.shared_filesystem), declare="--shared_filesystem",
                                probe=workers_probe(runner, options))


def make_writer(options: DatasetOutputOptions, schema: Schema, command: Sequence[str], *,
                workers: LocalWorkersChoice | None = None, progress_dir: str | None = None,
                shared_filesystem: bool = False, feature_transforms: Mapping[str, FeatureTransform] | None = None,
                duplicates: DuplicatesCheck | None = None, near_duplicates: NearDuplicateSettings | None = None,
                split_key_fn: SplitKeyFn | None = None,
                expected_inputs: int | None = None, inputs_identity: str | None = None, resume: bool = False,
                metadata: Mapping[str, Any] | None = None, commit: VersionCommit | None = None) -> WriteTFRecordDataset:
    """The writer from the shared options: its ``DatasetDescription`` and ``WriterTuning`` from the flags (``workers``:
    ``choose_local_workers`` when not given), the arguments in its ``WriterChecks`` and ``WriterProvenance``."""
    require_output(options)
    workers = workers or choose_local_workers(options, requested=None, flags=command)
    description = DatasetDescription(
        schema=schema, name=options.dataset_name, splits=SplitConfig.parse(options.splits),
        sharding=ShardingConfig(target_shard_bytes=options.target_shard_bytes,
                                max_shard_bytes=options.max_shard_bytes, num_shards=options.num_shards),
        compression=Compression.parse(options.compression), file_format=FileFormat.parse(options.file_format),
        dali_index=bool(options.dali_index), salt=options.salt, statistics=not options.no_statistics)
    return WriteTFRecordDataset(options.output, description=description, feature_transforms=feature_transforms,
                                checks=WriterChecks(
                                    max_rejected_fraction=options.max_rejected_fraction,
                                    max_rejected_option=MAX_REJECTED_FLAG, duplicates=duplicates,
                                    near_duplicates=near_duplicates, split_key_fn=split_key_fn),
                                provenance=WriterProvenance(
                                    expected_inputs=expected_inputs, inputs_identity=inputs_identity, resume=resume,
                                    command=redact_command(command), metadata=metadata or {}, commit=commit),
                                tuning=WriterTuning(
                                    spill_run_bytes=options.spill_run_mib * MiB, fan_in=FanIn.parse(options.fan_in),
                                    local_workers=workers.workers, encode_processes=options.encode_processes,
                                    shared_filesystem=shared_filesystem, progress_dir=progress_dir,
                                    shard_writers=1 if options.shard_writers is None else options.shard_writers))


@contextlib.contextmanager
def job_pipeline(options: PipelineOptions) -> Iterator[beam.Pipeline]:
    """``with beam.Pipeline(options)`` on the runner ``engine.job_runner_for`` picks, plus, on the DaskRunner, a local
    cluster when it names none and a wait that fails with ``ClusterStalledError`` rather than hanging
    (``wait_for_dask``). For the DirectRunner (named, or no runner named) the pipeline runs on its batch engine,
    never Prism (``beam_tfrecord.engine.local_engine.LocalBatchRunner``).

    With ``--dry_run=True`` (DataflowRunner only) the job ends after the runner has built it: see ``pipelines.dry_run``.
    """
    check_dry_run(options)
    with local_cluster_for(options), beam.Pipeline(runner=job_runner_for(options), options=options) as pipeline:
        yield pipeline  # the job is built in the with-block; an error there runs nothing
    end_if_dry_run(pipeline)  # on Dask, the result's wait is ``wait_for_dask``; it closes the job's client


def quiet_logging() -> None:
    """Keeps the console to what a user needs: warnings and errors, no per-stage chatter.

    Beam's DoFn runner also logs every exception a DoFn raises, with its traceback, before it
    re-raises it; the re-raised exception carries the same traceback (and ``run_as_command``
    turns ours into their message), so that log line only repeats it. With worker processes the
    same log lines come relayed from each worker as ERROR records (twice per error): dropped too,
    with each worker's two start-up warnings, while the workers' other warnings still pass.
    """
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    relay = logging.getLogger(WORKER_LOG_RELAY)
    if not any(isinstance(f, _DropRelayedErrors) for f in relay.filters):
        relay.addFilter(_DropRelayedErrors())
    quiet_worker_start_up()


class _DropRelayedErrors(logging.Filter):
    """Drops a worker's relayed ERROR records: the error they log fails the job, which reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def build_dataset(options: PipelineOptions, read: beam.PTransform, schema: Schema, command: Sequence[str], *,
                  shared_filesystem: bool, input_patterns: Sequence[str], inputs: InputFingerprint | None = None,
                  expected_inputs: int | None = None,
                  samples_at_most: int | None = None, **writer_options) -> Manifest:
    """Runs ``read | writer`` on the options' runner, prints what was written, returns the manifest.

    Args:
        options: the job's pipeline options (runner options and DatasetOutputOptions included).
        read: the source transform (a PBegin -> samples).
        schema: the feature spec.
        command: the command line to record in the manifest (secrets are redacted).
        shared_filesystem: the workers see this machine's local paths (what the job's
            ``require_worker_paths`` call, its first step, returned).
        input_patterns: globs of every input file: their sizes and update times identify the inputs
            of a build that ``--resume`` may take over (``WriteTFRecordDataset``'s ``inputs_identity``).
        inputs: their fingerprint, when the caller took it from a listing of its own
            (``fingerprint_listed``); None: they are listed here.
        expected_inputs: samples the source will emit, when the client counted them (the progress
            display's ETA, and the count the workers must reconcile with: ``InputsMismatchError``).
        samples_at_most: an upper bound of the samples, when the client knows one but no exact
            count (a manifest's lines): with the input files' bytes, it decides a small job, run in
            one in-memory worker (``beam_tfrecord.engine.local_workers.InputSize``).
        **writer_options: further WriteTFRecordDataset arguments (e.g. feature_transforms).
    """
    output = options.view_as(DatasetOutputOptions)
    require_output(output)
    quiet_logging()
    inputs = inputs or fingerprint_inputs(input_patterns)
    size = InputSize(expected_inputs if expected_inputs is not None else samples_at_most, inputs.num_bytes)
    workers = choose_local_workers(options, requested=None, flags=command, input_size=size)
    with lease.held(output.output, run_id=uuid.uuid4().hex[:12], break_lock=output.break_lock), \
            progress_for(options, expected_inputs=expected_inputs) as progress_dir:
        writer = make_writer(output, schema, command, workers=workers, progress_dir=progress_dir,
                             shared_filesystem=shared_filesystem, expected_inputs=expected_inputs, resume=output.resume,
                             inputs_identity=json.dumps(inputs.to_json(), sort_keys=True), **writer_options)
        reused = writer.reused_keys()
        if reused is not None and isinstance(read, SkipsReusedKeys):
            read = read.skipping(reused)  # a resumed build's source leaves out what it reuses, unread
        with cleaned_up_when_disk_full(lambda: storage.delete_tree(writer.temp_dir)), \
                job_pipeline(options) as pipeline:
            _ = pipeline | "Read" >> read | "WriteDataset" >> writer
    manifest = load_manifest(output.output)
    print(describe(manifest, output.output))
    print_how_it_ran(pipeline, writer, manifest, workers_reason=workers.reason)
    return manifest


@contextlib.contextmanager
def cleaned_up_when_disk_full(clean_up: Callable[[], None]) -> Iterator[None]:
    """Runs ``clean_up`` (deleting a failed job's temporary files) when the block fails with a full
    disk (``DiskFullError``, raised in the job or relayed by a worker), then lets the error go on.

    Nothing is published then (the manifest is written last), and what the job wrote would only
    keep the space a re-run needs. Other failures leave the files as they were.
    """
    try:
        yield
    except Exception as err:
        if isinstance(_our_error(err), DiskFullError):
            clean_up()
        raise


def describe_local_workers(workers: int, reason: str | None = None) -> str:
    """The summary's line on how many DirectRunner workers ran the job, and why (``LocalWorkersChoice``)."""
    if workers == 1:
        why = f": {reason}" if reason else ""
        return f"  ran in this process (1 in-memory DirectRunner worker{why})"
    why = reason or "one per core by default"
    return f"  ran in {workers} DirectRunner worker processes ({why}; --direct_num_workers=1 for one in-memory worker)"


def print_how_it_ran(pipeline: beam.Pipeline, writer: WriteTFRecordDataset, manifest: Manifest | None, *,
                     workers_reason: str | None = None) -> None:
    """The summary's lines on how a finished job ran: the fan-in path and why, what a resumed build
    reused (the shards: from ``manifest``, when there is one), the DirectRunner's workers (and why that
    many), and an encoding pool, when there was one."""
    print(writer.describe_fan_in(pipeline))
    for line in (writer.describe_resume(), describe_reused_shards(manifest.metadata) if manifest else None):
        if line:
            print(line)
    if runs_on_direct_runner(pipeline):
        print(describe_local_workers(local_workers_of(pipeline.options), workers_reason))
    for line in (describe_encode_processes(getattr(pipeline, "result", None)),
                 describe_pieces(getattr(pipeline, "result", None))):
        if line:
            print(line)


def _our_error(err: BaseException) -> BeamTFRecordError | None:
    """The first beam-tfrecord error on ``err``'s chain (runners wrap what a DoFn raised)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, BeamTFRecordError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


# What an interrupted job leaves: a publish is its manifest's write (shards are in place before it, and nothing reads
# them without it); a build's temp folder keeps what it finished (docs/command-line.md, "A killed build resumes").
INTERRUPTED = ("a dataset is published only once its manifest is written; a build keeps what it finished in its "
               "temp folder, for --resume")
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


def run_as_command(run: Callable[..., object], argv: Sequence[str] | None = None, *, prog: str) -> int:
    """Runs a job from the command line: a beam-tfrecord error (bad samples over the threshold, a
    corrupt shard...) prints its own message rather than the runner's traceback, and the exit code
    is 1; Ctrl-C prints one line, and the exit code is 130. Other errors propagate unchanged. ``prog``
    names the command in usage and error lines.
    """
    try:
        run(None if argv is None else list(argv), prog=prog)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; {INTERRUPTED}", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    except Exception as err:
        ours = _our_error(err)
        if ours is None:
            raise
        print(f"{prog}: {type(ours).__name__}: {ours}", file=sys.stderr)
        return 1
    return 0
