"""The registry of sources on the command line: ``--help`` lists each source once, and an audio folder and a
text folder build and refresh as every other source does.

Each source runs one story through ``beam-tfrecord`` (in this process, real DirectRunner, real files): a refresh
builds a full version; one file changes and one is added; the next refresh encodes only those two files' samples
and keeps the rest from LATEST; a clean ``build-*`` of the new files writes the same shards; every record read
back with ``read_numpy`` is the file's content.
"""

from __future__ import annotations

import collections
import re
import wave
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from beam_tfrecord import cli, load_manifest, read_numpy
from beam_tfrecord.versions.commit import COMMIT_KEY
from pipelines.sources import SOURCES

LAYOUT = ["--runner=DirectRunner", "--direct_running_mode=in_memory", "--progress=none", "--target_shard_bytes=400"]


def test_help_lists_each_source_once(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["refresh", "--help"]):
        with pytest.raises(SystemExit) as ended:
            cli.main(argv)
        assert ended.value.code == 0
        # a command's or source's line: indented 2 (refresh's table) or 4 (argparse's) spaces; wrapped lines, more
        words = [line.split()[0] for line in capsys.readouterr().out.splitlines() if re.match(r" {2,4}\S", line)]
        names = [source.command if argv == ["--help"] else source.name for source in SOURCES]
        assert collections.Counter(word for word in words if word in names) == dict.fromkeys(names, 1), argv


class Audio:
    """Mono 16-bit WAV files in two class folders; a changed file gets other samples."""

    flags: ClassVar[list[str]] = ["--labels_from_folders"]  # the source's own options
    refresh_flags: ClassVar[list[str]] = []

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "speech"
        self.clips: dict[tuple[str, str], np.ndarray] = {}  # (label, file) -> samples as written
        for label in ("no", "yes"):
            for number in range(3):
                self.write(label, f"{number}.wav", seed=number)
        self.args = ["--audio", str(self.root), *self.flags]

    def write(self, label: str, name: str, *, seed: int) -> None:
        pcm = np.random.default_rng(seed + 10 * len(label)).integers(-32768, 32767, 40 + seed, dtype=np.int16)
        (self.root / label).mkdir(parents=True, exist_ok=True)
        with wave.open(str(self.root / label / name), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(8000)
            out.writeframes(pcm.astype("<i2").tobytes())
        self.clips[(label, name)] = pcm

    def change(self) -> None:
        self.write("yes", "1.wav", seed=7)
        self.write("no", "3.wav", seed=8)

    def expected(self) -> collections.Counter:
        return collections.Counter((label, tuple(pcm / 32768.0)) for (label, _), pcm in self.clips.items())

    @staticmethod
    def records(dataset: str) -> collections.Counter:
        found = collections.Counter()
        for record in read_numpy(dataset):
            assert (record["sample_rate"], record["num_channels"]) == (8000, 1)
            found[(("no", "yes")[record["label"]], tuple(record["audio"].astype(np.float64)))] += 1
        return found

    command, source = "build-audio", "audio"
    counts: ClassVar[tuple[int, int]] = (5, 2)  # records kept and written by the append


class Text:
    """Text files, a sample per non-empty line; a changed file gets another line."""

    flags: ClassVar[list[str]] = ["--text_unit=line"]
    # Half of this tiny corpus's records change: past --max_deleted_fraction, which would rewrite the split.
    refresh_flags: ClassVar[list[str]] = ["--max_deleted_fraction=1"]

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "corpus"
        self.folder.mkdir()
        self.files = {"a.txt": "the first line\n\nthe second line\n", "b.txt": "été\nlast\n"}
        for name, text in self.files.items():
            (self.folder / name).write_text(text, encoding="utf-8")
        self.args = ["--text", str(self.folder / "*.txt"), *self.flags]

    def change(self) -> None:
        self.files["b.txt"] += "one more\n"
        self.files["c.txt"] = "a new file\n"
        for name in ("b.txt", "c.txt"):
            (self.folder / name).write_text(self.files[name], encoding="utf-8")

    def expected(self) -> collections.Counter:
        return collections.Counter(line for text in self.files.values() for line in text.splitlines() if line)

    @staticmethod
    def records(dataset: str) -> collections.Counter:
        return collections.Counter(record["text"].decode("utf-8") for record in read_numpy(dataset))

    command, source = "build-text", "text"
    counts: ClassVar[tuple[int, int]] = (2, 4)


def _run(*argv: str) -> None:
    assert cli.main(list(argv)) == 0, argv


@pytest.mark.parametrize("kind", [Audio, Text], ids=["audio", "text"])
def test_a_folder_builds_and_refreshes_from_the_command_line(kind: Any, tmp_path: Path) -> None:
    source = kind(tmp_path)
    root = str(tmp_path / "root")
    refresh = ["refresh", source.source, *source.args, *kind.refresh_flags, "--dataset_root", root,
               "--keep_versions=1", "--min_version_age=0", *LAYOUT]
    _run(*refresh)
    assert kind.records(root) == source.expected()
    first = load_manifest(root)
    assert first.metadata[COMMIT_KEY]["base_version"] is None and first.command[0] == f"refresh_{source.source}"

    source.change()
    _run(*refresh)
    refreshed = load_manifest(root)
    commit = refreshed.metadata[COMMIT_KEY]
    assert (commit["base_version"], commit["kept_records"], commit["written_records"]) == \
        (first.metadata["version_id"], *kind.counts)  # an append: the first version's shards are listed
    assert kind.records(root) == source.expected()

    built = str(tmp_path / "built")
    _run(source.command, *source.args, "--output", built, *LAYOUT)
    assert kind.records(built) == source.expected()
    _run("compact", "--dataset_root", root, "--keep_versions=1", "--min_version_age=0")
    assert [(s.filename, s.crc32c) for s in load_manifest(built).shards] == [
        (s.filename, s.crc32c) for s in load_manifest(root).shards]  # compacted: the clean build, byte for byte
