"""The side-file seam (``core.side_files``): each kind announces a file with its first row, writes it whole by
``finish``, and what it writes does not depend on how the rows were chunked. Beam-free, a few ms."""

import pickle
from pathlib import Path

import pytest

from beam_tfrecord.core.hashing import key_digests
from beam_tfrecord.core.runs import make_record_entries
from beam_tfrecord.core.side_files import EncodedChunk, SideFiles
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.digest_files import SECTIONS, DigestBuffer, DigestFile, read_sections
from beam_tfrecord.quality.near_duplicates import ImageSignature
from beam_tfrecord.quality.near_signatures import SignatureBuffer, SignatureFile, read_signature_files
from beam_tfrecord.spill.run_files import RunWriting, read_run_index

KEYS = [f"k{i:03d}" for i in range(40)]
RECORDS = [f"record {i % 7}".encode() for i in range(40)]  # 7 contents: duplicates among the 40
ENTRIES = make_record_entries(key_digests(KEYS, "s"), [[r] for r in RECORDS], [len(r) for r in RECORDS])
SIGNATURES = [(key, ImageSignature(i * 3, bytes(4))) for i, key in enumerate(KEYS[:5])] + [(KEYS[5], "no image")]


def _kinds(tmp_path: Path) -> dict[str, SideFiles]:
    return {"runs": RunWriting(str(tmp_path / "runs"), run_bytes=1 << 20, direct=False),
            "digests": DigestBuffer(DuplicatesCheck(DuplicatesMode.REPORT), str(tmp_path / "digests")),
            "signatures": SignatureBuffer(str(tmp_path / "signatures"))}


def _fed(side: SideFiles, chunks: list[EncodedChunk]) -> list:
    announced = []
    for chunk in chunks:
        side.add(chunk)
        announced += side.announce()
    side.finish()
    return announced + side.announce()


def _chunks(size: int) -> list[EncodedChunk]:
    return [EncodedChunk(ENTRIES[i:i + size], KEYS[i:i + size], [s for s in SIGNATURES if s[0] in KEYS[i:i + size]])
            for i in range(0, len(KEYS), size)]


@pytest.mark.parametrize("kind", ["runs", "digests", "signatures"])
def test_a_file_is_announced_with_its_first_row_and_is_whole_after_finish(tmp_path, kind):
    side = pickle.loads(pickle.dumps(_kinds(tmp_path)[kind]))  # it travels with its DoFn
    side.add(EncodedChunk([], []))
    assert side.announce() == []  # no row, no file
    side.add(_chunks(40)[0])
    announced = side.announce()
    assert len(announced) == 1 and side.announce() == []
    side.finish()
    path = announced[0].path
    assert Path(path).stat().st_size > 0
    if kind == "runs":
        assert len(read_run_index(announced[0]).hashes) == 40
    elif kind == "digests":
        assert type(announced[0]) is DigestFile and len(read_sections(path, 0, SECTIONS)) == 40
    else:
        assert type(announced[0]) is SignatureFile
        assert [(len(s.keys), s.not_hashed) for s in read_signature_files([path])] == [(5, ((KEYS[5], "no image"),))]
    if isinstance(side, RunWriting):
        side.stop()


def test_digests_are_the_same_whether_records_come_one_by_one_or_in_a_chunk(tmp_path):
    def digests(size: int, folder: str) -> list:
        side = DigestBuffer(DuplicatesCheck(DuplicatesMode.REPORT), str(tmp_path / folder))
        announced = _fed(side, _chunks(size))
        assert len(announced) == 1  # one file, started by the first record
        rows = read_sections(announced[0].path, 0, SECTIONS)
        return sorted(zip(rows.hi.tolist(), rows.lo.tolist(), rows.key_hashes.tolist(), list(rows.keys)))

    one_by_one = digests(1, "one")
    assert one_by_one == digests(40, "chunk")
    assert len({(hi, lo) for hi, lo, _, _ in one_by_one}) == 7
