"""Errors of the inputs: one sample (its values, its files, its transforms) or a whole source, and
too many rejected samples."""

from __future__ import annotations

import math

from beam_tfrecord.errors.base import BeamTFRecordError


class SampleError(BeamTFRecordError, ValueError):
    """One sample cannot be written: it names the sample, the feature and the expectation.

    Attributes:
        sample_key: the stable key of the sample (its source path, row id...).
        feature: the feature name, or None when the problem is the whole sample.
        expected: what the schema asks for.
        got: a short description of what was found.
    """

    def __init__(self, sample_key: str, feature: str | None, expected: str, got: str) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.expected = expected
        self.got = got
        where = f"feature {feature!r}: " if feature is not None else ""
        super().__init__(f"{where}expected {expected}, got {got} in sample {sample_key!r}")


class SampleReadError(BeamTFRecordError, OSError):
    """The payload of a sample (a file it points to) could not be read."""

    def __init__(self, sample_key: str, feature: str | None, path: str, reason: str) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.path = path
        self.reason = reason
        where = f"feature {feature!r}: " if feature is not None else ""
        super().__init__(f"{where}cannot read {path!r} ({reason}) in sample {sample_key!r}")


class MalformedRowError(SampleError):
    """A manifest row (CSV/JSONL/Parquet) cannot be turned into a sample, e.g. too few columns."""


class PathOutsideRootError(SampleReadError):
    """A manifest points to a file outside the root the user restricted paths to."""

    def __init__(self, sample_key: str, feature: str | None, path: str, root: str) -> None:
        super().__init__(sample_key, feature, path, f"it resolves outside the allowed root {root!r}")
        self.root = root


class SourceError(BeamTFRecordError, ValueError):
    """A source (manifest, array file, folder) is unusable as a whole: no files, no header, bad options."""


class ImageDecodeError(BeamTFRecordError, ValueError):
    """Image bytes could not be decoded (truncated, corrupt, or not an image at all)."""


class AudioDecodeError(BeamTFRecordError, ValueError):
    """Audio bytes could not be decoded (not a WAV file, truncated, unsupported encoding)."""


class FeatureTransformError(BeamTFRecordError, ValueError):
    """A per-feature transform (decode, resize...) failed on one sample's value.

    Attributes:
        sample_key: the sample's key.
        feature: the feature whose transform failed.
        cause: the exception the transform raised.
    """

    def __init__(self, sample_key: str, feature: str, cause: BaseException) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.cause = cause
        super().__init__(f"feature {feature!r}: {cause} in sample {sample_key!r}")


class InputChangedError(BeamTFRecordError):
    """A file-backed sample read again while writing its shard no longer gives the planned record.

    Large file-backed records are read from their source twice (validated, then written); a file
    changed or deleted in between would make the shard differ from the plan, so the job fails.
    """

    def __init__(self, sample_key: str, reason: str) -> None:
        self.sample_key = sample_key
        self.reason = reason
        super().__init__(f"input of sample {sample_key!r} changed while the job ran: {reason}; "
                         "re-run the job once the inputs are stable")


# How a caller sets the rejection threshold, as RejectedSamplesError's hint spells it.
MAX_REJECTED_ARGUMENT = "max_rejected_fraction="  # the writer transforms' argument (Python)


MAX_REJECTED_FLAG = "--max_rejected_fraction="  # the jobs' flag (command line)


class RejectedSamplesError(BeamTFRecordError):
    """More samples were rejected than the job allows, or every one; the dataset was not published.

    The message ends with the threshold that would let these rejections through, spelled as the
    caller sets it (``option``: ``MAX_REJECTED_ARGUMENT`` from Python, ``MAX_REJECTED_FLAG`` from a job);
    none when every input was rejected (a dataset of 0 records is never published).
    """

    def __init__(self, num_rejected: int, num_inputs: int, max_fraction: float, dead_letter_path: str,
                 examples: list[str], *, option: str = MAX_REJECTED_ARGUMENT) -> None:
        self.num_rejected = num_rejected
        self.num_inputs = num_inputs
        self.max_fraction = max_fraction
        self.dead_letter_path = dead_letter_path
        shown = "\n  ".join(examples)
        every = num_rejected == num_inputs  # no threshold publishes a dataset of 0 records from inputs
        how_many = (f"all {num_inputs} input samples were rejected (a dataset of 0 records is never published)"
                    if every else f"{num_rejected} of {num_inputs} input samples were rejected, more than the "
                                  f"allowed fraction {max_fraction:g}")
        enough = math.ceil(num_rejected / max(num_inputs, 1) * 10_000) / 10_000  # rounded up: lets them through
        hint = "" if every else f"\n(Allow skipping with {option}{min(enough, 1.0):g} or more.)"
        super().__init__(
            f"{how_many}; the dataset was NOT published. Every reason is in {dead_letter_path}. "
            f"First reasons:\n  {shown}{hint}"
        )


class DuplicatesFoundError(BeamTFRecordError, ValueError):
    """The inputs hold exact duplicates and the build was asked to fail on them (``duplicates=fail``);
    nothing was published (an old dataset, if any, stays as it was).

    Attributes:
        summary: the duplicates' summary line (records, groups, the split pairs they cross).
        examples: example groups, each as its keys (``a = b``).
    """

    def __init__(self, summary: str, examples: list[str]) -> None:
        self.summary = summary
        self.examples = examples
        shown = "\n  ".join(examples)
        super().__init__(f"{summary}; the dataset was NOT published (duplicates=fail). Examples of records with "
                         f"equal content:\n  {shown}\n(Keep one of each with duplicates=drop, or only count them "
                         "with duplicates=report.)")
