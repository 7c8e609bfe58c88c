"""Options shared by several build jobs.

Beam parses every ``PipelineOptions`` subclass that has been imported, so an option may be
defined only once per process: jobs that share an option view this class instead of
redefining it (each job's own input flag has a distinct name for the same reason).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.core.infer import schema_json_text
from beam_tfrecord.core.schema import Image, Schema
from beam_tfrecord.errors import BeamTFRecordError
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.split_groups import ColumnSplitKey
from beam_tfrecord.sources.chunks import DEFAULT_CHUNK_SIZE

_OFF = "off"  # --duplicates: no check at all
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


def parse_bool(text: str) -> bool:
    """A flag given alone or as ``--flag=true|false`` (the form Flex Templates and schedulers pass)."""
    value = text.strip().lower()
    if value in _TRUE | _FALSE:
        return value in _TRUE
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


class SchemaOptions(PipelineOptions):
    """How samples are checked: a pinned schema, full image decoding, chunking of small samples."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--schema", default=None,
                            help="schema JSON file (as printed by inference, or a dataset's manifest.json); "
                                 "default: infer it from the input and print it")
        parser.add_argument("--check_decode", type=parse_bool, nargs="?", const=True, default=False,
                            help="decode every image in full to reject truncated or corrupt files "
                                 "(--check_decode or --check_decode=true|false)")
        parser.add_argument("--chunk_size", type=int, default=DEFAULT_CHUNK_SIZE,
                            help="small samples (rows, vectors) per Beam element")


def load_schema(path: str) -> Schema:
    """A schema from a JSON file: a schema object, or a whole dataset manifest holding one."""
    try:
        data = json.loads(storage.read_bytes(path))
        return Schema.from_json(data.get("schema", data) if isinstance(data, dict) else data)
    except (OSError, ValueError, BeamTFRecordError) as err:
        raise SystemExit(f"--schema {path!r}: cannot load a schema ({type(err).__name__}: {err})") from err


def with_check_decode(schema: Schema) -> Schema:
    """The schema with full-decode validation turned on for every image feature."""
    return Schema({name: Image(f.format, f.shape, check_decode=True) if isinstance(f, Image) else f
                   for name, f in schema.features.items()}, schema.sequence_features)


def pinned_or_inferred(checks: SchemaOptions, infer: Callable[[], Schema], *, job: str) -> Schema:
    """The schema from ``--schema``, or inferred by ``infer()`` and printed so the user can pin it.

    Raises:
        SystemExit: naming the job and the error, when the schema cannot be loaded or inferred.
    """
    try:
        if checks.schema:
            return load_schema(checks.schema)
        schema = infer()
    except BeamTFRecordError as err:
        raise SystemExit(f"{job}: {type(err).__name__}: {err}") from err
    print(f"Inferred schema (save it to a file and pass --schema FILE to pin it):\n{schema_json_text(schema)}")
    return schema


class QualityOptions(PipelineOptions):
    """Exact duplicates and splits that keep a group together (every build job takes these)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--duplicates", default="report", choices=[*(m.value for m in DuplicatesMode), _OFF],
                            help="records with equal features (less the key and --duplicates_exclude): count them "
                                 "within and across splits (report: the summary and the manifest), keep one of each "
                                 "(drop: the smallest key hash, counted as dropped), publish nothing (fail), or do "
                                 "not look (off)")
        parser.add_argument("--duplicates_exclude", default="",
                            help="comma-separated features left out of the duplicate check (a path, a timestamp)")
        parser.add_argument("--split_by", default=None,
                            help="a column whose value decides the split instead of the key, so that every row of "
                                 "one value (a user, a patient) lands in one split (ratio --splits only)")


def quality_writer_options(options: PipelineOptions, schema: Schema, *,
                           key_feature: str | None = None) -> dict[str, Any]:
    """The writer's ``duplicates`` and ``split_key_fn`` from ``QualityOptions`` (``key_feature``: a feature that
    holds the key, left out of the content hash).

    Raises:
        SystemExit: naming a feature the schema does not have.
    """
    quality = options.view_as(QualityOptions)
    excluded = [name.strip() for name in quality.duplicates_exclude.split(",") if name.strip()]
    features = {*schema.features, *schema.sequence_features}
    unknown = [name for name in [*excluded, *([quality.split_by] if quality.split_by else [])] if name not in features]
    if unknown:
        raise SystemExit(f"--duplicates_exclude / --split_by name {unknown}, not features of the schema "
                         f"{sorted(features)}")
    if key_feature in features:
        excluded.append(key_feature)
    return {"duplicates": None if quality.duplicates == _OFF else DuplicatesCheck(DuplicatesMode(quality.duplicates),
                                                                                 tuple(excluded)),
            "split_key_fn": ColumnSplitKey(quality.split_by) if quality.split_by else None}
