"""Text files -> UTF-8 strings (and token ids from a user tokenizer), per file or per line."""

import json

import pytest
import tensorflow as tf

from beam_tfrecord import WriterChecks
from beam_tfrecord.sources.text import ReadTextFiles, TextUnit, text_schema

SPEC = {"text": tf.io.FixedLenFeature([], tf.string), "tokens": tf.io.RaggedFeature(tf.int64)}


def byte_tokenizer(text: str) -> list[int]:
    """A stand-in for a real tokenizer's ``encode``: one id per UTF-8 byte."""
    if "FAIL" in text:
        raise ValueError("this tokenizer refuses 'FAIL'")
    return list(text.encode("utf-8"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    (root / "a.txt").write_text("héllo wörld\nsecond line ✓\n\n", encoding="utf-8")
    (root / "b.txt").write_text("one more\r\n", encoding="utf-8")
    return root


def test_one_sample_per_file_with_tokens(corpus, tmp_path, write, parse):
    write(ReadTextFiles(str(corpus / "*.txt"), tokenizer=byte_tokenizer), text_schema(tokens=True),
          str(tmp_path / "out"))
    parsed = parse(str(tmp_path / "out"), SPEC)
    texts = {(corpus / name).read_bytes() for name in ("a.txt", "b.txt")}
    assert set(parsed["text"].tolist()) == texts
    for text, tokens in zip(parsed["text"], parsed["tokens"]):
        assert tokens == list(text)


def test_one_sample_per_line(corpus, tmp_path, write, parse):
    manifest = write(ReadTextFiles(str(corpus / "*.txt"), unit=TextUnit.LINE, chunk_size=2), text_schema(),
                     str(tmp_path / "out"))
    assert manifest.num_inputs == 3  # the empty line is not a sample
    parsed = parse(str(tmp_path / "out"), {"text": SPEC["text"]})
    assert sorted(t.decode() for t in parsed["text"]) == ["héllo wörld", "one more", "second line ✓"]


def test_invalid_utf8_and_tokenizer_failures_are_dead_letters(tmp_path, write):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "lines.txt").write_bytes(b"fine\nbad \xff byte\nplease FAIL\n")
    manifest = write(ReadTextFiles(str(tmp_path / "in" / "*.txt"), unit=TextUnit.LINE, tokenizer=byte_tokenizer),
                     text_schema(tokens=True), str(tmp_path / "out"), checks=WriterChecks(max_rejected_fraction=1.0))
    assert (manifest.num_inputs, manifest.num_rejected) == (3, 2)
    letters = [json.loads(line) for line in (tmp_path / "out" / manifest.dead_letters).read_text().splitlines()]
    assert letters == [
        {"key": "lines.txt:2", "stage": "validate", "error_type": "SampleError", "feature": "text",
         "message": "feature 'text': expected string scalar of valid UTF-8, got invalid UTF-8 byte b'\\xff' at "
                    "position 4 in sample 'lines.txt:2'"},
        {"key": "lines.txt:3", "stage": "decode", "error_type": "ValueError", "feature": "tokens",
         "message": "feature 'tokens': the tokenizer failed (this tokenizer refuses 'FAIL') in sample "
                    "'lines.txt:3'"},
    ]
