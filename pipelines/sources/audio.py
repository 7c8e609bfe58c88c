"""A folder of WAV files as a source: a sample per file, decoded to float samples (or its bytes passed through),
labelled by its folder if asked; a refresh's input is a file. See docs/inputs.md, "Audio (WAV)"."""

from __future__ import annotations

import argparse
import functools

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.sources.audio import (
    ReadAudioFiles,
    audio_class_names,
    audio_samples,
    audio_schema,
    list_audio_files,
)
from pipelines.source_options import parse_bool
from pipelines.sources import source_named
from pipelines.sources.spec import (
    InputsIndex,
    SourcePlan,
    SourceSpec,
    add_input_option,
    file_inputs,
    fresh_files,
    tokens_of,
)

ENTRY = source_named("audio")


class AudioOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_input_option(parser, ENTRY)
        parser.add_argument("--decode_audio", type=parse_bool, nargs="?", const=True, default=True,
                            help="decode each file to float32 samples in [-1, 1) with sample_rate and num_channels "
                                 "(a file that does not decode is a dead letter); --decode_audio=false keeps "
                                 "the file's bytes")
        parser.add_argument("--labels_from_folders", type=parse_bool, nargs="?", const=True, default=False,
                            help="add a label: the folder holding the file, relative to ROOT (the class names "
                                 "are the folders holding WAV files)")


def _files_glob(root: str) -> str:
    return root.rstrip("/") + "/**"


def _plan(options: PipelineOptions, *, job: str) -> SourcePlan:
    source = options.view_as(AudioOptions)
    files = list_audio_files(source.audio)
    names = audio_class_names(source.audio, files) if source.labels_from_folders else None
    return SourcePlan(schema=audio_schema(decode=source.decode_audio, class_names=names),
                      read=ReadAudioFiles(source.audio, decode=source.decode_audio,
                                          labels_from_folders=source.labels_from_folders),
                      files=files, expected_inputs=len(files))


def _read_file(element: tuple[str, str], *, decode: bool, labels: bool) -> list[list[Sample | DeadLetter]]:
    name, path = element
    return [list(audio_samples(name, path, decode=decode, labels=labels))]


def _index(options: PipelineOptions, plan: SourcePlan) -> InputsIndex:
    """An input per file, keyed by its path below ROOT."""
    source = options.view_as(AudioOptions)
    read = functools.partial(_read_file, decode=source.decode_audio, labels=source.labels_from_folders)
    return InputsIndex(file_inputs(plan.files, lambda name, _: [name], tokens_of(_files_glob(source.audio))),
                       fresh_files(plan.files, read, "ReadFreshAudio"))


SPEC = SourceSpec(
    entry=ENTRY, options=AudioOptions,
    description="Builds a dataset from the WAV files under a folder (any depth), a sample per file.",
    plan=_plan, index=_index, inputs_glob=_files_glob, sample_options=("decode_audio", "labels_from_folders"),
    refused=(("schema", "the schema comes from --decode_audio and --labels_from_folders"),
             ("chunk_size", "audio files are one sample per Beam element"),
             ("check_decode", "--decode_audio decodes every file (one that does not decode is a dead letter)")))
