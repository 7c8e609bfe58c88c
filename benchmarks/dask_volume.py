"""Dask volume benchmark: the writer on Beam's DaskRunner with memory-capped workers, against the DirectRunner.

    python benchmarks/dask_volume.py                       # the issue's sizes: 4 GiB small, 5 GiB blobs, 600k
    python benchmarks/dask_volume.py --small_gib 0.5 --blob_gib 0.5 --throughput_records 100000   # quicker
    python benchmarks/dask_volume.py --small_gib 4 --blob_gib 0 --throughput_records 0 --paths library \
        --repeats 10 --dask_partition_size 0      # issue 45: a user's own pipeline, 10 times (add --no_give_back
                                                  # to see the hang it fixed, --memory_limit 768MiB to go lower)

Rows, each its own child process, measured the same way: the pipeline's wall time (imports
excluded) and the peak RSS of the whole process tree (client, scheduler, nannies and workers, or
the DirectRunner's worker processes), sampled every 100 ms.

- volume, small records: ``Create(range(chunks)) | Map(chunk of 1,000 samples)``, each a 32x32x3
  uint8 Tensor and a ClassLabel (3.1 KB records), splits train=0.9,test=0.1, 64 MiB shards, at
  ``--small_gib`` (default 4 GiB: twice the cluster's 2 x 1 GiB of worker memory); on the
  DirectRunner (the reference bytes) and on a LocalCluster of 2 worker processes x 1 thread, each
  capped at ``--memory_limit`` (1 GiB), ``--dask_partition_size`` elements per partition, with
  ``beam_tfrecord.engine.dask_runner.DaskRunner`` (what the jobs run; ``--beam_runner_too`` adds
  Beam's own DaskRunner, whose ParDo outputs outlive their partition).
- volume, blobs: file-backed records of ~200 KB (``--blob_gib``, default 5 GiB of files), same runners.
- throughput: ``--throughput_records`` (600k) small records on the DirectRunner with
  ``--direct_running_mode=multi_processing --direct_num_workers=2`` and on Dask, interleaved
  ``--repeats`` times (median); the ratio is the issue's point 3.

- paths: ``jobs`` waits with ``wait_for_dask`` as the jobs do; ``library`` is a user's own
  ``with beam.Pipeline(argv) as p: ... | WriteTFRecordDataset(..., tuning=WriterTuning(shared_filesystem=True))`` with
  ``--runner beam_tfrecord.engine.dask_runner.DaskRunner --dask_client_address``, ``--repeats`` times each.

Restarts and the longest stall come from ``wait_for_dask`` (jobs path); pauses, the longest pause and
the peak worker RSS from polling the scheduler every 0.5 s (a pause shorter than that can be missed);
a run still going after ``--hang_seconds`` is killed and counted as hung, one that fails with
``ClusterStalledError`` as stalled. "identical" compares every shard's CRC32C and size with the
DirectRunner build of the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workloads
from measure import child_env, run_measured

MULTI_PROCESSING = "--direct_running_mode=multi_processing --direct_num_workers=2"


def _small_samples(index: int, total: int):
    from beam_tfrecord import Sample

    keys, images, labels = workloads.small_chunk(index, total)
    return [Sample(key, {"image": image, "label": label}) for key, image, label in zip(keys, images, labels.tolist())]


BLOB_CHUNK = 100


def _blob_chunk(index: int, blob_dir: str, count: int):
    """Samples of blob files ``index * BLOB_CHUNK`` on (paths with their sizes, read by the writer)."""
    from beam_tfrecord import FileRef, Sample

    samples = []
    for i in range(index * BLOB_CHUNK, min(count, (index + 1) * BLOB_CHUNK)):
        path = os.path.join(blob_dir, f"blob-{i:06d}.bin")
        samples.append(Sample(os.path.basename(path), {"payload": FileRef(path, os.path.getsize(path)),
                                                       "label": i % 10}))
    return samples


def _child(args: argparse.Namespace) -> None:
    import apache_beam as beam

    from beam_tfrecord import (
        ClassLabel,
        DType,
        Scalar,
        Schema,
        ShardingConfig,
        SplitConfig,
        Tensor,
        TensorDType,
        WriterTuning,
        WriteTFRecordDataset,
    )
    from beam_tfrecord.beam.write import FanIn
    from beam_tfrecord.engine.dask_cluster import wait_for_dask

    def build(pipeline: beam.Pipeline, shared_filesystem: bool = False) -> None:
        if args.workload == "small":
            schema = Schema({"image": Tensor(TensorDType.UINT8, workloads.IMAGE_SHAPE),
                             "label": ClassLabel(tuple(str(i) for i in range(10)))})
            samples = (pipeline | beam.Create(range(workloads.num_chunks(args.records)))
                       | beam.Map(_small_samples, args.records))
        else:
            schema = Schema({"payload": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})
            samples = (pipeline | beam.Create(range((args.records + BLOB_CHUNK - 1) // BLOB_CHUNK))
                       | beam.Map(_blob_chunk, args.blob_dir, args.records))
        _ = samples | WriteTFRecordDataset(args.out, schema=schema, splits=SplitConfig.parse("train=0.9,test=0.1"),
                                           sharding=ShardingConfig(target_shard_bytes=64 << 20),
                                           tuning=WriterTuning(fan_in=FanIn.parse(args.fan_in),
                                                               shared_filesystem=shared_filesystem))

    import apache_beam.runners.dask.dask_runner

    import beam_tfrecord.beam.write  # noqa: F401

    report: dict = {"restarts": 0, "stalled_seconds": 0.0, "outcome": "finished"}
    if args.runner in ("dask", "beam-dask", "dask-library"):
        from distributed import LocalCluster

        start = time.perf_counter()
        from beam_tfrecord.engine.worker_placement import scheduler_on_this_machine
        from beam_tfrecord.errors import ClusterStalledError

        if args.no_give_back:  # the runner as it was before workers gave freed memory back (the hang)
            _skip_give_back()
        runner = ("apache_beam.runners.dask.dask_runner.DaskRunner" if args.runner == "beam-dask"
                  else "beam_tfrecord.engine.dask_runner.DaskRunner")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=args.memory_limit,
                          dashboard_address=None) as cluster, _Watch(cluster.scheduler_address) as watch:
            argv = [f"--runner={runner}", f"--dask_client_address={cluster.scheduler_address}",
                    f"--dask_stall_timeout_seconds={args.stall_timeout_seconds}",
                    *([f"--dask_partition_size={args.dask_partition_size}"] if args.dask_partition_size else [])]
            _exit_if_hung(args.hang_seconds, watch)
            try:
                if args.runner == "dask-library":  # a user's own pipeline: the runner's result waits
                    with beam.Pipeline(argv=argv) as pipeline:
                        build(pipeline, shared_filesystem=True)
                else:
                    with scheduler_on_this_machine(cluster.scheduler_address):  # local paths: its workers are here
                        pipeline = beam.Pipeline(argv=argv)
                        build(pipeline)
                        result = pipeline.run()
                        try:
                            done = wait_for_dask(result, stall_timeout_seconds=args.stall_timeout_seconds)
                            report.update(restarts=done.restarts, stalled_seconds=done.stalled_seconds)
                        finally:
                            result.client.close()
            except ClusterStalledError as err:
                report.update(outcome="stalled", error=str(err)[:300])
            report.update(watch.summary())
    else:
        start = time.perf_counter()
        with beam.Pipeline(argv=["--runner=DirectRunner", *args.direct_options.split()]) as pipeline:
            build(pipeline)
    print(json.dumps({"seconds": time.perf_counter() - start, **report}))


def _skip_give_back() -> None:
    from distributed import Client

    from beam_tfrecord.engine.dask_runner import GiveMemoryBack

    register = Client.register_plugin

    def register_but_give_back(self, plugin, *args, **kwargs):
        return None if isinstance(plugin, GiveMemoryBack) else register(self, plugin, *args, **kwargs)

    Client.register_plugin = register_but_give_back


class _Watch:
    """Polls the scheduler every 0.5 s from a thread: each worker's pauses, longest pause and peak RSS."""

    def __init__(self, address: str) -> None:
        import threading

        self._address = address
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.pauses = 0
        self.paused_seconds = 0.0
        self.longest_pause = 0.0
        self.peak_worker_rss = 0
        self.states: dict[str, str] = {}
        self.memory: dict[str, int] = {}

    def _run(self) -> None:
        from distributed import Client

        with Client(self._address, timeout=30) as client:
            paused_since: dict[str, float] = {}
            while not self._stop.wait(0.5):
                try:
                    workers = client.scheduler_info(n_workers=-1)["workers"]
                except Exception:  # the cluster closing
                    return
                now = time.monotonic()
                for info in workers.values():
                    name, status = str(info.get("name")), str(info.get("status"))
                    rss = int(info.get("metrics", {}).get("memory", 0))
                    self.peak_worker_rss = max(self.peak_worker_rss, rss)
                    self.states[name], self.memory[name] = status, rss
                    if status == "paused" and name not in paused_since:
                        paused_since[name] = now
                        self.pauses += 1
                    elif status != "paused" and name in paused_since:
                        seconds = now - paused_since.pop(name)
                        self.paused_seconds += seconds
                        self.longest_pause = max(self.longest_pause, seconds)
                for since in paused_since.values():
                    self.longest_pause = max(self.longest_pause, now - since)

    def summary(self) -> dict:
        return {"pauses": self.pauses, "paused_seconds": self.paused_seconds, "longest_pause": self.longest_pause,
                "peak_worker_rss": self.peak_worker_rss}

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _exit_if_hung(hang_seconds: float, watch: _Watch) -> None:
    """After ``hang_seconds``, reports a hang (with the workers' states) and kills this process tree."""
    import threading

    import psutil

    def fire() -> None:
        print(json.dumps({"seconds": hang_seconds, "outcome": "hung", "restarts": 0, "stalled_seconds": 0.0,
                          "states": watch.states, "worker_rss_mib": {k: v >> 20 for k, v in watch.memory.items()},
                          **watch.summary()}), flush=True)
        for child in psutil.Process().children(recursive=True):
            child.kill()
        os._exit(0)

    timer = threading.Timer(hang_seconds, fire)
    timer.daemon = True
    timer.start()


def _shards(out: str) -> list[tuple[str, str, int]]:
    from beam_tfrecord import load_manifest

    return [(s.filename, s.crc32c, s.num_bytes) for s in load_manifest(out).shards]


def _measure(args: argparse.Namespace, *, workload: str, records: int, runner: str, direct_options: str = "",
             fan_in: str = "auto") -> dict:
    out = os.path.join(args.work_dir, f"{workload}-{runner}-{records}")
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    command = [sys.executable, __file__, "--child", "--workload", workload, "--records", str(records),
               "--runner", runner, "--out", out, "--blob_dir", args.blob_dir, "--memory_limit", args.memory_limit,
               "--dask_partition_size", str(args.dask_partition_size), "--direct_options", direct_options,
               "--fan_in", fan_in, "--stall_timeout_seconds", str(args.stall_timeout_seconds),
               "--hang_seconds", str(args.hang_seconds), *(["--no_give_back"] if args.no_give_back else [])]
    names = {"dask": "dask (the jobs' wait_for_dask)", "beam-dask": "dask (Beam's DaskRunner)",
             "dask-library": "dask (user's pipeline, library path)"}
    row = {"workload": workload, "records": records,
           "runner": names.get(runner, f"direct {direct_options or 'default'}"),
           "memory_limit": args.memory_limit if runner in names else "-", "fan_in": fan_in}
    try:
        measured = run_measured(command, env=child_env(HERE), interval_s=0.1)
    except RuntimeError as err:
        print(f"  FAILED: {str(err)[-600:]}", flush=True)
        return {**row, "failed": True, "outcome": "error"}
    result = json.loads(measured.stdout.strip().splitlines()[-1])
    row.update(outcome=result["outcome"], pauses=result.get("pauses", 0), longest_pause=result.get("longest_pause", 0),
               peak_worker_rss_gib=result.get("peak_worker_rss", 0) / 2**30, seconds=result["seconds"],
               peak_rss_gib=measured.peak_rss_bytes / 2**30, restarts=result["restarts"],
               stalled_seconds=result["stalled_seconds"])
    if result["outcome"] != "finished":
        print(f"  {workload} {records} {row['runner']}: {result['outcome'].upper()} after {result['seconds']:.0f} s, "
              f"{row['pauses']} pauses, peak worker {row['peak_worker_rss_gib']:.2f} GiB: "
              f"{ {k: v for k, v in result.items() if k in ('states', 'worker_rss_mib', 'error')} }", flush=True)
        shutil.rmtree(out, ignore_errors=True)
        return {**row, "failed": True}
    shards = _shards(out)
    data_bytes = sum(size for _, _, size in shards)
    row.update(data_gib=data_bytes / 2**30, shards=shards, failed=False)
    shutil.rmtree(out, ignore_errors=True)
    print(f"  {workload} {records} {row['runner']} fan_in={fan_in}: {row['seconds']:.1f} s, "
          f"peak {row['peak_rss_gib']:.2f} GiB (worker {row['peak_worker_rss_gib']:.2f}), restarts {row['restarts']}, "
          f"pauses {row['pauses']} (longest {row['longest_pause']:.0f} s)", flush=True)
    return row


def _table(rows: list[dict]) -> None:
    print(f"\n{'workload':<8} {'records':>9} {'data GiB':>8} {'runner':<36} {'fan_in':<7} {'mem limit':>9} "
          f"{'seconds':>8} {'peak GiB':>8} {'worker':>6} {'restarts':>8} {'pauses':>6} {'longest':>7}  identical")
    reference: dict[tuple[str, int], list] = {}
    for row in rows:
        if row["failed"]:
            print(f"{row['workload']:<8} {row['records']:>9} {'':>8} {row['runner']:<36} {row['fan_in']:<7} "
                  f"{row['memory_limit']:>9} {row.get('seconds', 0):8.1f}   {row['outcome'].upper()}"
                  f" ({row.get('pauses', 0)} pauses, longest {row.get('longest_pause', 0):.0f} s)")
            continue
        key = (row["workload"], row["records"])
        reference.setdefault(key, row["shards"])
        identical = "yes" if row["shards"] == reference[key] else "NO"
        print(f"{row['workload']:<8} {row['records']:>9} {row['data_gib']:8.2f} {row['runner']:<36} "
              f"{row['fan_in']:<7} {row['memory_limit']:>9} {row['seconds']:8.1f} {row['peak_rss_gib']:8.2f} "
              f"{row['peak_worker_rss_gib']:6.2f} {row['restarts']:>8} {row['pauses']:>6} {row['longest_pause']:7.0f}"
              f"  {identical}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small_gib", type=float, default=4.0, help="volume of small records (0: skip)")
    parser.add_argument("--blob_gib", type=float, default=5.0, help="volume of ~200 KB file-backed records (0: skip)")
    parser.add_argument("--throughput_records", type=int, default=600_000, help="small records (0: skip)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each Dask volume row, and interleaved runs of the throughput pair")
    parser.add_argument("--paths", default="jobs,library",
                        help="Dask volume rows: jobs (wait_for_dask), library (a user's own pipeline), or both")
    parser.add_argument("--hang_seconds", type=float, default=1800.0,
                        help="a Dask run still going after this is killed and counted as hung")
    parser.add_argument("--memory_limit", default="1GiB", help="each Dask worker's memory_limit")
    parser.add_argument("--dask_partition_size", type=int, default=32,
                        help="elements per Dask partition (an element is a chunk of 1,000 records or 100 files; "
                             "the DaskRunner holds a partition's outputs together; 0: the runner's default, fitted to "
                             "the workers' memory limit: engine/dask_partitions.py)")
    parser.add_argument("--shuffle_too", action="store_true",
                        help="also run the small-records volume row with fan_in=shuffle on Dask (for comparison)")
    parser.add_argument("--beam_runner_too", action="store_true",
                        help="also run the small-records volume row on Beam's own DaskRunner (for comparison)")
    parser.add_argument("--stall_timeout_seconds", type=float, default=120.0)
    parser.add_argument("--blob_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_dask_blobs"))
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_dask_volume"))
    parser.add_argument("--no_give_back", action="store_true",
                        help="Dask workers keep what they free, as before GiveMemoryBack (to see the hang it fixes)")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--workload", choices=["small", "blobs"])
    parser.add_argument("--records", type=int)
    parser.add_argument("--runner", choices=["direct", "dask", "beam-dask", "dask-library"])
    parser.add_argument("--out")
    parser.add_argument("--direct_options", default="")
    parser.add_argument("--fan_in", default="auto")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    rows = []
    record_bytes = 3_100  # 32x32x3 bytes plus the label and framing, as written
    if args.small_gib:
        records = int(args.small_gib * 2**30 / record_bytes)
        rows.append(_measure(args, workload="small", records=records, runner="direct"))
        for _ in range(args.repeats):
            for path in args.paths.split(","):
                runner = {"jobs": "dask", "library": "dask-library"}[path]
                rows.append(_measure(args, workload="small", records=records, runner=runner))
        if args.shuffle_too:
            rows.append(_measure(args, workload="small", records=records, runner="dask", fan_in="shuffle"))
        if args.beam_runner_too:
            rows.append(_measure(args, workload="small", records=records, runner="beam-dask"))
    if args.blob_gib:
        count = int(args.blob_gib * 2**30 / (200 * 1024))
        workloads.make_blob_files(args.blob_dir, count, 200 * 1024)
        rows.append(_measure(args, workload="blobs", records=count, runner="direct"))
        rows.append(_measure(args, workload="blobs", records=count, runner="dask"))
    pairs: dict[str, list[float]] = {"direct": [], "dask": []}
    if args.throughput_records:
        for _ in range(args.repeats):
            for runner in ("direct", "dask"):
                row = _measure(args, workload="small", records=args.throughput_records, runner=runner,
                               direct_options=MULTI_PROCESSING if runner == "direct" else "")
                rows.append(row)
                if not row["failed"]:
                    pairs[runner].append(row["seconds"])
    _table(rows)
    if pairs["direct"] and pairs["dask"]:
        direct, dask = (sorted(v)[len(v) // 2] for v in (pairs["direct"], pairs["dask"]))
        print(f"\nthroughput, {args.throughput_records} small records (median of {args.repeats}): DirectRunner "
              f"multi_processing x2 {direct:.1f} s, DaskRunner {dask:.1f} s: dask/direct speed = {direct / dask:.2f}")


if __name__ == "__main__":
    main()
