"""Follow mode: a reader of a root yields each commit's new records exactly once, whatever commits it skipped and
whatever a compaction rewrote; resumes from its ``FollowState``; shares commits between readers and DataLoader
workers. The root (built once per module by the real refresh job): version 1 = images 0-1 of each class, version 2
appends image 2 of each, version 3 appends image 3 of each and compacts (``--max_small_shards=0``: every record
rewritten into new shards).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader import read_numpy
from beam_tfrecord.reader.follow import Follow, FollowState
from pipelines import refresh_image_dataset
from pipelines.make_sample_images import CLASSES, write_sample_images

PER_CLASS = 4


BATCHES = ((0, 1), (2,), (3,))  # the image numbers of each class that arrive with each version


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], dict[int, set[bytes]]]:
    """(root, its version ids in order, the image bytes of each batch)."""
    base = tmp_path_factory.mktemp("follow")
    write_sample_images(str(base / "all"), per_class=PER_CLASS, size=16)
    images, root = base / "images", str(base / "root")
    versions, by_batch = [], {}
    for number, batch in enumerate(BATCHES):
        by_batch[number] = set()
        for kind in CLASSES:
            (images / kind).mkdir(parents=True, exist_ok=True)
            for image in batch:
                os.rename(base / "all" / kind / f"{image:04d}.jpg", images / kind / f"{image:04d}.jpg")
                by_batch[number].add((images / kind / f"{image:04d}.jpg").read_bytes())
        compact = ["--max_small_shards=0"] if number == 2 else []
        refresh_image_dataset.run(["--input", str(images), "--dataset_root", root, "--target_shard_bytes=8000",
                                   "--min_version_age=0", "--runner=DirectRunner", "--direct_running_mode=in_memory",
                                   *compact])
        versions.append(max(os.listdir(Path(root, "versions"))))
    commits = [load_manifest(str(Path(root, "versions", v))).metadata["commit"] for v in versions]
    assert [c["base_version"] for c in commits] == [None, *versions[:2]]  # appends
    assert commits[2]["rewritten_splits"] == ["train"]  # version 3 compacted: every record in new shards
    return root, versions, by_batch


def _images(examples) -> list[bytes]:
    return [bytes(example["image"]) for example in examples]


def test_a_new_follower_reads_what_is_published_then_ends_after_its_timeout(grown):
    root, _, by_class = grown
    assert sorted(_images(read_numpy(root, follow=True, follow_timeout_seconds=0))) == \
        sorted(set().union(*by_class.values()))


def test_a_plain_dataset_directory_is_read_once_then_the_follower_ends(grown):
    """A build's own folder (no root, no prefix: here the first version's) is one commit: its records, then the end."""
    root, versions, by_batch = grown
    first = str(Path(root, "versions", versions[0]))
    assert sorted(_images(read_numpy(first, follow=True, follow_timeout_seconds=0))) == sorted(by_batch[0])


@pytest.mark.parametrize("after, expected", [(0, (1, 2)), (1, (2,))], ids=["skips-a-commit", "next-commit"])
def test_a_compacting_commit_yields_only_its_new_records(grown, after, expected):
    root, versions, by_class = grown
    state = FollowState(commit=versions[after], position=len(by_class[after]),
                        previous=versions[after - 1] if after else None)
    read = _images(read_numpy(root, follow=True, follow_timeout_seconds=0, follow_state=state.to_dict()))
    assert sorted(read) == sorted(set().union(*(by_class[number] for number in expected)))


def test_a_restarted_follower_resumes_without_loss_or_repeat(grown):
    root, versions, by_class = grown
    first = read_numpy(root, follow=True, follow_timeout_seconds=0,
                       follow_state=FollowState(commit=versions[0], position=len(by_class[0])))
    head = _images(next(first) for _ in range(3))
    saved = first.state()
    assert (saved.commit, saved.position, saved.previous) == (versions[2], 3, versions[0])
    first.close()
    rest = _images(read_numpy(root, follow=True, follow_timeout_seconds=0, follow_state=saved))
    assert sorted(head + rest) == sorted(by_class[1] | by_class[2])


def test_readers_share_each_commit_exactly(grown):
    root, _, by_class = grown
    parts = [_images(read_numpy(root, follow=True, follow_timeout_seconds=0, num_workers=2, worker_index=index))
             for index in range(2)]
    assert parts[0] and parts[1]
    assert sorted(parts[0] + parts[1]) == sorted(set().union(*by_class.values()))


def test_torch_workers_follow_and_resume_from_the_loader_state(grown):
    pytest.importorskip("torch")
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from fork_server import FORK_SERVER

    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset, collate

    root, _, by_class = grown

    def loader():
        dataset = TFRecordIterableDataset(root, follow=True, follow_timeout_seconds=0, rank=0, world_size=1)
        return stateful.StatefulDataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate,
                                           multiprocessing_context=FORK_SERVER)

    first = loader()
    head: list[bytes] = []
    for batch in first:
        head.extend(batch["image"])
        if len(head) >= 4:
            break
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    rest = [image for batch in second for image in batch["image"]]
    assert sorted(head + rest) == sorted(set().union(*by_class.values()))


def test_bad_follow_options_are_refused(grown):
    root, _, _ = grown
    cases = {"shuffle": (dict(shuffle=True), "follow=True reads each commit's new records in stored order: shuffle "
                                             "must be False"),
             "expression": (dict(split="train[:10%]"), "follow=True reads one split by name (each commit's new "
                                                       "records of it), got 'train[:10%]'"),
             "mixture": (dict(path={root: 1.0}), f"follow=True reads one dataset path (a root, a directory or a Beam "
                                                 f"prefix), got {{{root!r}: 1.0}}"),
             "poll": (dict(follow_poll_seconds=0), "follow_poll_seconds must be a number of seconds > 0, got 0")}
    for name, (options, message) in cases.items():
        with pytest.raises(ReaderError) as caught:
            read_numpy(**{"path": root, **options}, follow=True)
        assert str(caught.value) == message, name
    with pytest.raises(ReaderError, match="follow_timeout_seconds must be"):
        Follow(timeout_seconds=-1)
    with pytest.raises(ReaderError, match="not a follow state"):
        FollowState.from_dict({"format": "something else"})
    other_part = FollowState(part=1, parts=2).to_dict()
    assert FollowState.from_dict(other_part) == FollowState(part=1, parts=2)
    with pytest.raises(ReaderError, match="the follow state is of reader 1 of 2, not 0 of 1"):
        read_numpy(root, follow=True, follow_state=other_part)


def test_read_dataset_follows_from_a_commit_to_the_end_of_its_timeout(grown):
    pytest.importorskip("tensorflow")
    from beam_tfrecord.reader import read_dataset

    root, _, by_class = grown
    dataset = read_dataset(root, follow=True, follow_timeout_seconds=0, batch_size=5, label_key="label")
    read = [bytes(image) for features, _ in dataset for image in features["image"].numpy()]
    assert sorted(read) == sorted(set().union(*by_class.values()))


def test_a_follower_batches_a_commit_as_read_numpy_batches(grown):
    root, versions, by_class = grown
    state = FollowState(commit=versions[0], position=len(by_class[0]))
    batches = list(read_numpy(root, follow=True, follow_timeout_seconds=0, follow_state=state, batch_size=4))
    assert [len(batch["label"]) for batch in batches] == [4, 2]  # version 3's 6 new records: one commit
    assert type(batches[0]["image"]).__name__ == "RaggedArray"  # packed as read_numpy packs its batches
    assert sorted(bytes(image) for batch in batches for image in batch["image"]) == sorted(by_class[1] | by_class[2])


def test_a_root_whose_latest_appears_between_two_reads_is_taken_as_the_root(grown, monkeypatch):
    """A follower's poll read no LATEST, then opened the root (at the LATEST just written): it took that as a plain
    directory's commit, the next poll as another one, and yielded the first version's records twice (seen once in
    the watch test on gs://). The poll now reads LATEST again once the open succeeded."""
    import beam_tfrecord.reader.follow as follow_module

    root, versions, _ = grown
    real = follow_module.read_latest
    calls = []

    def written_just_after_the_first_read(path):
        calls.append(path)
        return None if len(calls) == 1 else real(path)

    monkeypatch.setattr(follow_module, "read_latest", written_just_after_the_first_read)
    commit = follow_module.load_commit(root)
    assert commit is not None and (commit.commit_id, commit.version) == (versions[-1], versions[-1])
    assert len(calls) >= 2
