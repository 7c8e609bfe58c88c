"""Fuzz check: thousands of seeded mutations of a dataset's shards and manifest (tests/fuzzing.py).

    python benchmarks/fuzz_check.py                    # 2,000 dataset cases + 20,000 framing/decoding cases
    python benchmarks/fuzz_check.py --cases 500 --seed 3

The cases run in a child process, so an interpreter crash would be seen (and reported) rather than
end the check. Each case has a 30 s limit. Prints the tally, the time, and PASS or FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")


def _child(args: argparse.Namespace) -> None:
    sys.path.insert(0, TESTS)
    import fuzzing

    dataset = fuzzing.write_fuzz_dataset(os.path.join(args.work_dir, "dataset"))
    start = time.perf_counter()
    tally = fuzzing.run_cases(dataset, args.work_dir, args.cases, args.seed)
    cases_s = time.perf_counter() - start
    start = time.perf_counter()
    byte_cases, byte_failures = fuzzing.fuzz_dataset_bytes(dataset, args.byte_cases, args.seed)
    bytes_s = time.perf_counter() - start
    print(json.dumps({"tally": {k: v for k, v in vars(tally).items() if k not in ("kinds", "failures")},
                      "kinds": dict(tally.kinds), "failures": tally.failures[:20], "num_failures": len(tally.failures),
                      "cases_s": cases_s, "byte_cases": byte_cases, "byte_failures": byte_failures[:20],
                      "num_byte_failures": len(byte_failures), "bytes_s": bytes_s}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2_000, help="dataset cases (shards and manifest)")
    parser.add_argument("--byte_cases", type=int, default=20_000, help="framing and decoding cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_fuzz"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, __file__, "--child", "--cases", str(args.cases), "--byte_cases",
                           str(args.byte_cases), "--seed", str(args.seed), "--work_dir", args.work_dir],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"FAIL: the fuzzing process ended with code {done.returncode}:\n{done.stderr[-2000:]}")
        sys.exit(1)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    tally = report["tally"]
    print(f"dataset cases: {tally['cases']} ({tally['changed']} changed the file; kinds: "
          f"{', '.join(f'{k} {v}' for k, v in sorted(report['kinds'].items()))})")
    print(f"  shard mutations: {tally['shards_changed']}; caught by verify {tally['caught_by_verify']}, NumPy reader "
          f"CorruptShardError naming the shard {tally['numpy_typed']}, PyTorch {tally['torch_typed']}, tf.data "
          f"raised without altered data {tally['tf_raised']}")
    manifest_cases = tally["changed"] - tally["shards_changed"]
    print(f"  manifest mutations: {manifest_cases}; ManifestError {tally['manifest_rejected']}, caught by verify "
          f"{tally['manifest_caught_by_verify']}, undetectable (only fields no reader uses) {tally['undetectable']}")
    print(f"  failures: {report['num_failures']} {report['failures']}; {report['cases_s']:.1f} s "
          f"({1000 * report['cases_s'] / max(tally['cases'], 1):.0f} ms a case)")
    print(f"framing and decoding cases: {report['byte_cases']}, untyped errors {report['num_byte_failures']} "
          f"{report['byte_failures']}; {report['bytes_s']:.1f} s")
    ok = report["num_failures"] == 0 and report["num_byte_failures"] == 0
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
