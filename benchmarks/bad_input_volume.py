"""Bad input at volume: 100,000 rows with 5% bad samples of 14 kinds against a clean corpus of the
same size, each built by one run of the manifest job (--check_decode, --restrict_paths).

    python benchmarks/bad_input_volume.py                 # 100,000 rows
    python benchmarks/bad_input_volume.py --rows 20000

Checks that exactly the bad rows are dead letters, each with its own reason, and that the counts
are exact; prints the wall time of each build (its own process, imports excluded) and the ratio.
The corpus is tests/bad_volume.py's (the kinds of tests/test_bad_inputs.py).
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from bad_volume import BAD_KINDS, job_args, write_volume_corpus


def _build(root: str, output: str) -> tuple[float, object]:
    from pipelines import build_from_manifest

    start = time.perf_counter()
    manifest = build_from_manifest.run(job_args(root, output, max_rejected_fraction=0.1))
    return time.perf_counter() - start, manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--bad_fraction", type=float, default=0.05)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_bad_volume"))
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    import pipelines.build_from_manifest  # noqa: F401  (imports outside the timings)

    bad_root, clean_root = os.path.join(args.work_dir, "bad"), os.path.join(args.work_dir, "clean")
    expected = write_volume_corpus(bad_root, args.rows, args.bad_fraction)
    write_volume_corpus(clean_root, args.rows, 0.0)
    clean_s, clean = _build(clean_root, os.path.join(clean_root, "out"))
    bad_s, manifest = _build(bad_root, os.path.join(bad_root, "out"))
    with open(os.path.join(bad_root, "out", manifest.dead_letters)) as handle:
        letters = {letter["key"]: letter for letter in map(json.loads, handle)}
    wrong = [key for key, (stage, error_type, feature, message) in expected.items()
             if key not in letters or (letters[key]["stage"], letters[key]["error_type"], letters[key]["feature"])
             != (stage, error_type, feature) or not letters[key]["message"].startswith(message)]
    extra = sorted(set(letters) - set(expected))
    kinds = {key.rsplit("-", 1)[0] for key in expected}
    print(f"corpus: {args.rows:,} rows, {len(expected):,} bad of {len(kinds)} kinds ({', '.join(BAD_KINDS)})")
    print(f"bad corpus:   {manifest.num_inputs:,} inputs, {manifest.num_written:,} written, "
          f"{manifest.num_rejected:,} dead letters; {len(wrong)} expected dead letters wrong or missing, "
          f"{len(extra)} unexpected; {bad_s:.2f} s")
    print(f"clean corpus: {clean.num_inputs:,} inputs, {clean.num_written:,} written, {clean.num_rejected} rejected; "
          f"{clean_s:.2f} s")
    print(f"bad / clean time = {bad_s / clean_s:.2f}")
    ok = (not wrong and not extra and manifest.num_rejected == len(expected)
          and manifest.num_written == args.rows - len(expected) and clean.num_written == args.rows)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
