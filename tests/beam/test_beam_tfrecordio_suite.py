"""Beam's own test module for WriteToTFRecord (``apache_beam/io/tfrecordio_test.py``, from the installed wheel),
run with ``WriteToTFRecord`` swapped for ``WriteBalancedTFRecord``: nothing of Beam's is copied here.

Every case passes, the three streaming ones (``TestStream``, unbounded: each fired pane one commit under Beam's
per-window names, beam/windowed_write.py) included; only Beam's own skip remains.
"""

from __future__ import annotations

import unittest

import apache_beam as beam
import apache_beam.io.tfrecordio_test as beam_tests
import pytest

from beam_tfrecord import WriteBalancedTFRecord

STREAMING_CLASSES = (beam_tests.WriteStreamingTest,)
# Beam's own skips, for what this machine lacks (nothing of the drop-in's): case -> Beam's reason.
BEAM_SKIPS = {"TestTFRecordUtil.test_masked_crc32c_crcmod": "crcmod not installed."}


def _case_ids() -> list[str]:
    """Every test case of Beam's module, as ``Class.method`` (loaded as unittest loads them)."""
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromModule(beam_tests)
    ids: list[str] = []

    def walk(tests: unittest.TestSuite) -> None:
        for test in tests:
            if isinstance(test, unittest.TestSuite):
                walk(test)
            else:
                ids.append(test.id().removeprefix(f"{beam_tests.__name__}."))
    walk(suite)
    return sorted(ids)


CASES = _case_ids()
STREAMING_CASES = [c for c in CASES if c.split(".")[0] in {cls.__name__ for cls in STREAMING_CLASSES}]
BOUNDED_CASES = [c for c in CASES if c not in STREAMING_CASES]


@pytest.fixture
def swapped(monkeypatch):
    """Beam's module writes with the drop-in: its own name, and ``beam.io.WriteToTFRecord`` (streaming cases)."""
    monkeypatch.setattr(beam_tests, "WriteToTFRecord", WriteBalancedTFRecord)
    monkeypatch.setattr(beam.io, "WriteToTFRecord", WriteBalancedTFRecord)


def _run(case: str) -> unittest.TestResult:
    test = unittest.TestLoader().loadTestsFromName(case, beam_tests)
    result = unittest.TestResult()
    test.run(result)
    return result


def test_the_module_has_the_cases_this_file_expects():
    assert len(BOUNDED_CASES) == 35 and len(STREAMING_CASES) == 3, (len(BOUNDED_CASES), STREAMING_CASES)
    assert sum(c.startswith(("TestWriteToTFRecord.", "TestEnd2EndWriteAndRead.")) for c in BOUNDED_CASES) == 9


@pytest.mark.parametrize("case", BOUNDED_CASES)
def test_beams_bounded_case_passes_with_the_drop_in(swapped, case):
    result = _run(case)
    problems = [text for _, text in result.errors + result.failures]
    assert result.testsRun == 1 and not problems, problems
    assert [reason for _, reason in result.skipped] in ([], [BEAM_SKIPS.get(case)]), result.skipped


@pytest.mark.parametrize("case", STREAMING_CASES)
def test_beams_streaming_case_passes_with_the_drop_in(swapped, case):
    result = _run(case)
    problems = [text for _, text in result.errors + result.failures]
    assert result.testsRun == 1 and not problems and not result.skipped, problems
