"""The sources a job reads, one row each in ``SOURCES``: its name, commands and input option; the module of the
same name here declares the rest once (``SPEC``: options, transform, how a refresh identifies its inputs).

The build and refresh jobs, ``beam-tfrecord --help`` and the refresh's source table derive from it
(``pipelines/source_jobs.py``). Beam-free, so that ``beam-tfrecord inspect`` never imports Beam (~2 s): a source's
module is imported when its job runs. Adding a source: its ``beam_tfrecord/sources/`` module, a module here with
its ``SourceSpec`` (``spec.py``), one row in ``SOURCES`` (docs/development.md).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SourceEntry:
    """A source's row.

    Attributes:
        name: the source in ``beam-tfrecord refresh NAME``; its module here is the name with ``_`` for ``-``.
        command: its build command, ``beam-tfrecord COMMAND``.
        input_flag: the option naming its inputs (a distinct name per source: Beam parses every option class).
        what: what that option names, in the refresh's source table and in "required" errors.
        build_job: the build's name in a manifest's command (and its legacy ``python -m pipelines.X`` module).
        refresh_job: the refresh's name in a manifest's command.
    """

    name: str
    command: str
    input_flag: str
    what: str
    build_job: str
    refresh_job: str

    @property
    def input_option(self) -> str:
        """The input option's name, without ``--`` (its attribute on the options)."""
        return self.input_flag.removeprefix("--")

    @property
    def build_help(self) -> str:
        """The build command's line in ``beam-tfrecord --help``."""
        return (f"{self.what} -> dataset (a Beam job: {self.input_flag}, --output, and any pipeline option such as "
                f"--runner); see `beam-tfrecord {self.command} --help`")

    @property
    def module(self) -> str:
        """The module declaring the source's ``SPEC`` (``pipelines.sources.spec.spec_of`` imports it)."""
        return f"{__name__}.{self.name.replace('-', '_')}"


SOURCES: tuple[SourceEntry, ...] = (
    SourceEntry("image-folder", "build", "--input", "an image folder ROOT/<label>/<file>",
                "build_image_dataset", "refresh_image_dataset"),
    SourceEntry("manifest", "build-manifest", "--manifest",
                "CSV / JSONL / Parquet manifests (file or glob), a row per sample, keyed by --key_column",
                "build_from_manifest", "refresh_manifest"),
    SourceEntry("arrays", "build-arrays", "--arrays", ".npy / .npz files (file or glob), axis 0 indexes samples",
                "build_from_arrays", "refresh_arrays"),
    SourceEntry("audio", "build-audio", "--audio", "a folder of WAV files ROOT/**.wav (labels: their folders)",
                "build_audio", "refresh_audio"),
    SourceEntry("text", "build-text", "--text", "text files (file or glob), a sample per file or per line",
                "build_text", "refresh_text"),
)


def source_named(name: str) -> SourceEntry:
    """The row of source ``name`` (KeyError: every caller passes a name read from ``SOURCES``)."""
    return {entry.name: entry for entry in SOURCES}[name]
