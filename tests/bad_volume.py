"""A bad-input corpus at volume: the 14 kinds of tests/test_bad_inputs.py, spread through N rows.

``write_volume_corpus(root, rows, bad_fraction)`` writes the files once and a manifest.csv of
``rows`` rows, every ``1 / bad_fraction``-th one bad (kinds in turn, each key unique), and
returns the expected dead letter of every bad key. Used by tests/test_bad_input_volume.py and
benchmarks/bad_input_volume.py.
"""

from __future__ import annotations

import json
import os

from test_bad_inputs import HEADER, SCHEMA, write_corpus

BAD_KINDS = ("missing-file", "zero-byte", "truncated-jpeg", "truncated-png", "text-as-jpg", "wrong-size",
             "wrong-type", "nan-score", "inf-score", "unknown-label", "bad-utf8", "too-few-columns", "outside-root",
             "too-large")
GOOD_TEMPLATES = ("good-1", "good-3")


def write_volume_corpus(root: str, rows: int, bad_fraction: float) -> dict[str, tuple[str, str, str | None, str]]:
    """Writes root/data (files and manifest.csv) and root/schema.json; returns key -> expected dead letter."""
    base = write_corpus(root)
    manifest = os.path.join(root, "data", "manifest.csv")
    with open(manifest, "rb") as handle:
        lines = handle.read().split(b"\n")
    templates = {}
    for line in lines:
        key = line.split(b",", 1)[0].decode("ascii", "replace")
        if key in BAD_KINDS or key in GOOD_TEMPLATES:
            templates[key] = line[len(key):]
    step = round(1 / bad_fraction) if bad_fraction else 0
    expected = {}
    out = [HEADER.encode()]
    for i in range(rows):
        if step and i % step == 0:
            kind = BAD_KINDS[(i // step) % len(BAD_KINDS)]
            key = f"{kind}-{i:06d}"
            stage, error_type, feature, message = base[kind]
            message = message.replace(f"in sample '{kind}'", f"in sample '{key}'").replace(
                "CSV row 14 ", f"CSV row {i + 1} ")  # data rows, one line each here
            expected[key] = (stage, error_type, feature, message)
        else:
            kind = GOOD_TEMPLATES[i % 2]
            key = f"good-{i:06d}"
        out.append(key.encode() + templates[kind])
    with open(manifest, "wb") as handle:
        handle.write(b"\n".join(out) + b"\n")
    with open(os.path.join(root, "schema.json"), "w") as handle:
        json.dump(SCHEMA.to_json(), handle)
    return expected


def job_args(root: str, output: str, *, max_rejected_fraction: float) -> list[str]:
    return ["--manifest", os.path.join(root, "data", "manifest.csv"), "--schema", os.path.join(root, "schema.json"),
            "--key_column", "id", "--file_columns", "blob", "--restrict_paths", "--check_decode",
            "--output", output, "--target_shard_bytes", "150000", "--max_shard_bytes", "200000",
            "--max_rejected_fraction", str(max_rejected_fraction)]
