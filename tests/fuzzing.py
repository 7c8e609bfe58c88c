"""Seeded fuzzing of a published dataset: mutated shards and manifests against verify and every reader.

``run_cases(dataset, work_dir, cases, seed)`` copies a dataset, applies one seeded mutation per
case (to a shard's bytes or to the manifest), checks what ``verify``, the NumPy reader, the
PyTorch reader and tf.data do with it, restores the file, and returns a tally. A case fails when:

* a shard mutation that changed stored bytes passes ``verify``;
* the NumPy or PyTorch reader does anything but raise ``CorruptShardError`` naming the mutated shard;
* tf.data yields an example that is not in the original dataset, or ends without an error
  (its own errors, ``tf.errors.OpError``, count as raising; so do ours);
* a manifest mutation is accepted and then either verify passes with different shards listed or
  a reader yields altered data (accepted mutations that change only fields no reader or verify
  uses are tallied as ``undetectable``: nothing but a signature could catch those);
* anything raises an untyped error, or a case takes longer than ``case_seconds`` (``SIGALRM``).

``fuzz_bytes`` exercises the light readers' framing and Example decoding directly.
Used by tests/test_fuzz.py (a few hundred cases) and benchmarks/fuzz_check.py (thousands).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import os
import random
import shutil
import signal
from collections.abc import Callable

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock, split_frames
from beam_tfrecord.core.framing import frame, iter_records
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import BeamTFRecordError, CorruptShardError, ManifestError
from beam_tfrecord.reader.decode.block_decode import BlockDecoder, rows
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.verify import verify_dataset


class CaseTimeout(Exception):
    pass


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One seeded mutation of ``data``: (kind, mutated bytes)."""
    n = len(data)
    at = rng.randrange(max(n, 1))
    span = rng.randint(1, max(1, min(64, n - at)))
    kind = rng.choice(["bit-flip", "truncate", "insert", "delete", "zero-block", "duplicate", "swap"])
    if kind == "bit-flip":
        out = bytearray(data)
        out[at] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    if kind == "truncate":
        return kind, data[:at]
    if kind == "insert":
        return kind, data[:at] + rng.randbytes(span) + data[at:]
    if kind == "delete":
        return kind, data[:at] + data[at + span:]
    if kind == "zero-block":
        return kind, data[:at] + bytes(span) + data[at + span:]
    if kind == "duplicate":
        return kind, data[:at + span] + data[at:at + span] + data[at + span:]
    other = rng.randrange(max(n - span, 1))
    first, second = sorted((at, other))
    if second < first + span:
        return "swap", data
    return kind, data[:first] + data[second:second + span] + data[first + span:second] + \
        data[first:first + span] + data[second + span:]


def _set_field(data: dict, rng: random.Random) -> str:
    """Sets one shard-related manifest field to a hostile value; returns its name."""
    split = rng.choice(data["splits"])
    value = rng.choice([-1, 0, 10**12, "../x", "/etc/passwd", "gs://b/o", None, 1.5, True, [], "zz"])
    if split["shards"] and rng.random() < 0.8:
        shard = rng.choice(split["shards"])
        field = rng.choice(sorted(shard))
        shard[field] = value
        return f"shard.{field}"
    field = rng.choice(["num_inputs", "num_rejected", "compression", "dead_letters", "dataset_name", "splits"])
    data[field] = value
    return field


@dataclasses.dataclass
class Tally:
    cases: int = 0
    changed: int = 0
    shards_changed: int = 0
    caught_by_verify: int = 0
    manifest_caught_by_verify: int = 0
    numpy_typed: int = 0
    torch_typed: int = 0
    tf_raised: int = 0
    manifest_rejected: int = 0
    undetectable: int = 0
    kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)


def _alarm(_signum, _frame):
    raise CaseTimeout()


def _identity(key, index) -> tuple[str, int]:
    return (key.decode() if isinstance(key, bytes) else str(key)), int(index)


def _examples(dataset: str) -> set[tuple[str, int]]:
    """(key, i) of every example of a fuzz dataset (see ``write_fuzz_dataset``), read with the NumPy reader."""
    manifest = load_manifest(dataset)
    return {_identity(example["key"], example["i"])
            for split in manifest.splits for example in read_numpy(dataset, split=split.name)}


def write_fuzz_dataset(out: str, records: int = 600) -> str:
    """A small dataset of (key: string, i: int64) records in several shards of two splits."""
    import apache_beam as beam

    from beam_tfrecord import DType, Sample, Scalar, Schema, ShardingConfig, SplitConfig, WriteTFRecordDataset

    schema = Schema({"key": Scalar(DType.STRING), "i": Scalar(DType.INT64)})
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([Sample(f"k{i:05d}", {"key": f"k{i:05d}", "i": i}) for i in range(records)])
             | WriteTFRecordDataset(out, schema=schema, splits=SplitConfig.parse("train=0.7,test=0.3"),
                                    sharding=ShardingConfig(target_shard_bytes=3_000)))
    return out


def _expect_typed(read: Callable[[], object], shard: str | None) -> str | None:
    """None when ``read`` raises CorruptShardError naming ``shard`` (any shard when None); else why not."""
    try:
        read()
    except CorruptShardError as err:
        if shard is not None and os.path.basename(err.shard) != shard:
            return f"named {err.shard!r}, not {shard!r}"
        return None
    except BeamTFRecordError as err:
        return f"raised {type(err).__name__}: {err}"
    return "raised nothing"


def _tf_check(dataset: str, split: str, originals: set[tuple[str, int]]) -> str | None:
    import tensorflow as tf

    from beam_tfrecord.reader.tf_data import read_dataset

    try:
        for batch in read_dataset(dataset, split=split, batch_size=64):
            for key, index in zip(batch["key"].numpy().tolist(), batch["i"].numpy().tolist()):
                if _identity(key, index) not in originals:
                    return f"tf.data yielded altered data {(key, index)}"
    except (tf.errors.OpError, BeamTFRecordError):
        return None
    return "tf.data ended without an error"


def run_cases(dataset: str, work_dir: str, cases: int, seed: int, *, case_seconds: int = 30,
              readers: bool = True) -> Tally:
    """Runs ``cases`` seeded mutations on a copy of ``dataset`` in ``work_dir`` (see the module docstring)."""
    copy = os.path.join(work_dir, "copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(dataset, copy)
    manifest = load_manifest(copy)
    originals = _examples(copy)
    rng = random.Random(seed)
    tally = Tally()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in range(cases):
            tally.cases += 1
            signal.alarm(case_seconds)
            try:
                _one_case(copy, manifest, originals, rng, tally, readers=readers, case=case)
            except CaseTimeout:
                tally.failures.append(f"case {case}: took over {case_seconds} s")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return tally


def _one_case(copy: str, manifest, originals: set[tuple[str, int]], rng: random.Random,
              tally: Tally, *, readers: bool, case: int) -> None:
    if rng.random() < 0.8:
        shard = rng.choice([s for s in manifest.shards if s.num_records])
        path = os.path.join(copy, shard.filename)
        target = shard.filename
    else:
        shard, path, target = None, os.path.join(copy, "manifest.json"), "manifest.json"
    with open(path, "rb") as handle:
        original = handle.read()
    try:
        if shard is not None:
            kind, mutated = mutate(original, rng)
        elif rng.random() < 0.5:
            kind, mutated = mutate(original, rng)
            kind = f"manifest-bytes-{kind}"
        else:
            data = json.loads(original)
            kind = f"manifest-field-{_set_field(data, rng)}"
            mutated = json.dumps(data).encode()
        tally.kinds[kind] += 1
        if mutated == original:
            return
        tally.changed += 1
        with open(path, "wb") as handle:
            handle.write(mutated)
        where = f"case {case} ({kind} of {target})"
        if shard is None:
            _manifest_case(copy, manifest, originals, tally, where)
            return
        tally.shards_changed += 1
        why = _expect_typed(lambda: verify_dataset(copy), target)
        if why is None:
            tally.caught_by_verify += 1
        else:
            tally.failures.append(f"{where}: verify {why}")
        if not readers:
            return
        why = _expect_typed(lambda: list(read_numpy(copy, split=shard.split)), target)
        tally.numpy_typed += why is None
        if why:
            tally.failures.append(f"{where}: NumPy reader {why}")
        from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

        why = _expect_typed(lambda: list(TFRecordIterableDataset(copy, split=shard.split)), target)
        tally.torch_typed += why is None
        if why:
            tally.failures.append(f"{where}: PyTorch reader {why}")
        why = _tf_check(copy, shard.split, originals)
        tally.tf_raised += why is None
        if why:
            tally.failures.append(f"{where}: {why}")
    except CaseTimeout:
        raise
    except Exception as err:  # an untyped error is a failure of the case, not of the run
        tally.failures.append(f"case {case} ({target}): untyped {type(err).__name__}: {err}")
    finally:
        with open(path, "wb") as handle:
            handle.write(original)


def _manifest_case(copy: str, manifest, originals: set[tuple[str, int]], tally: Tally, where: str) -> None:
    try:
        tampered = load_manifest(copy)
    except ManifestError:
        tally.manifest_rejected += 1
        return
    if tampered.shards == manifest.shards and tampered.splits == manifest.splits and \
            tampered.schema == manifest.schema:
        verify_dataset(copy)  # still the same dataset: must verify
        tally.undetectable += 1  # e.g. created_at or command changed: no reader or verify uses them
        return
    try:
        verify_dataset(copy)
    except CorruptShardError:
        tally.manifest_caught_by_verify += 1
        return
    if _examples(copy) != originals:
        tally.failures.append(f"{where}: accepted, verified, and the readers see other data")
    else:
        tally.undetectable += 1


def _outcome(read: Callable[..., object], *args: object) -> object:
    """What ``read(*args)`` gives: its value, or the offset and message of its CorruptShardError (other
    errors propagate)."""
    try:
        return read(*args)
    except CorruptShardError as err:
        return ("CorruptShardError", err.offset, str(err))


def _block_rows(blocks: BlockDecoder, records: list[bytes]) -> list[tuple]:
    columns = blocks.decode(RecordBlock.of_records("record", records, list(range(len(records)))))
    return [tuple((name, np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v) for name, v in row.items())
            for row in rows(columns)]


def _record_rows(decoder: RecordDecoder, records: list[bytes]) -> list[tuple]:
    return [tuple((name, np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v)
                  for name, v in decoder.decode(r, shard="record", offset=i).items()) for i, r in enumerate(records)]


def fuzz_bytes(cases: int, seed: int, records: list[bytes], decoder: RecordDecoder) -> tuple[int, list[str]]:
    """Mutates framed streams and serialized records; the light readers may only raise CorruptShardError.

    The block readers (``core.blocks.split_frames``, ``reader.decode.block_decode``) must also give what the
    record-by-record ones give: the same records and values, or the same error at the same offset.
    """
    rng = random.Random(seed)
    stream = b"".join(frame(r) for r in records)
    blocks = BlockDecoder(decoder.schema)
    failures = []
    for case in range(cases):
        kind, mutated = mutate(stream, rng)
        try:
            by_record = _outcome(lambda data: list(iter_records(io.BytesIO(data), name="stream")), mutated)
            walked = _outcome(lambda data: split_frames(np.frombuffer(data, dtype=np.uint8), name="stream"), mutated)
            if isinstance(by_record, list) and (not isinstance(walked, tuple) or walked[1] != len(mutated) or [
                    walked[0].record(i) for i in range(len(walked[0]))] != by_record):
                failures.append(f"framing case {case} ({kind}): the block walk differs from the record reader")
        except Exception as err:
            failures.append(f"framing case {case} ({kind}): untyped {type(err).__name__}: {err}")
        kind, mutated = mutate(rng.choice(records), rng)
        block = [*rng.sample(records, min(3, len(records))), mutated]
        try:
            by_record = _outcome(_record_rows, decoder, block)
            by_block = _outcome(_block_rows, blocks, block)
            if by_record != by_block:
                failures.append(f"decoding case {case} ({kind}): the block decoder differs from the protobuf library")
        except Exception as err:
            failures.append(f"decoding case {case} ({kind}): untyped {type(err).__name__}: {err}")
    return cases, failures


def fuzz_dataset_bytes(dataset: str, cases: int, seed: int) -> tuple[int, list[str]]:
    """``fuzz_bytes`` on the records of a fuzz dataset's first shard, decoded with its schema."""
    manifest = load_manifest(dataset)
    with open(os.path.join(dataset, manifest.shards[0].filename), "rb") as handle:
        records = list(iter_records(handle, name=manifest.shards[0].filename))
    return fuzz_bytes(cases, seed, records, RecordDecoder(manifest.schema))
