"""Bad input at volume: 10,000 rows with 5% bad samples of 14 kinds, built in one job run with
--max_rejected_fraction 0.1: exactly the bad ones are dead letters, each with its own reason, and
the counts are exact (benchmarks/bad_input_volume.py runs the same at 100,000 rows and times it)."""

from __future__ import annotations

import json
import os

from bad_volume import BAD_KINDS, job_args, write_volume_corpus

from beam_tfrecord.verify import verify_dataset
from pipelines import build_from_manifest

ROWS = 10_000


def test_exactly_the_bad_samples_are_dead_letters_with_their_reasons(tmp_path):
    root = str(tmp_path / "corpus")
    expected = write_volume_corpus(root, ROWS, 0.05)
    assert len(expected) == ROWS // 20 and {key.rsplit("-", 1)[0] for key in expected} == set(BAD_KINDS)
    output = str(tmp_path / "out")
    manifest = build_from_manifest.run(job_args(root, output, max_rejected_fraction=0.1))
    with open(os.path.join(output, manifest.dead_letters)) as handle:
        letters = {letter["key"]: letter for letter in map(json.loads, handle)}
    assert sorted(letters) == sorted(expected)  # no good sample rejected, no bad one written or lost
    for key, (stage, error_type, feature, message) in expected.items():
        letter = letters[key]
        assert (letter["stage"], letter["error_type"], letter["feature"]) == (stage, error_type, feature), key
        assert letter["message"].startswith(message) and letter["message"].endswith(f" in sample {key!r}"), letter
    assert (manifest.num_inputs, manifest.num_rejected, manifest.num_written) == (ROWS, ROWS // 20, ROWS - ROWS // 20)
    assert verify_dataset(output).num_records == ROWS - ROWS // 20
