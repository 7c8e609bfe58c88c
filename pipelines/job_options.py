"""A job's command line: ``--help`` listing its options by group, and unknown options refused.

Each job declares its options once, as ``PipelineOptions`` subclasses. ``JobCommand`` groups them for
``--help`` and, because Beam keeps any option it does not know, refuses one that neither the job nor Beam
defines, naming the closest known option (docs/command-line.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from beam_tfrecord.engine.table import import_runner_options

BEAM_OPTIONS_DOC = "https://beam.apache.org/releases/pydoc/current/apache_beam.options.pipeline_options.html"
_EPILOG = ("Apache Beam's pipeline options pass through: --runner (DirectRunner, the default; DataflowRunner, "
           "FlinkRunner, DaskRunner...), --direct_running_mode=multi_processing --direct_num_workers=N, "
           "--project, --region, --temp_location, --flink_master, --dask_client_address and the rest; see "
           f"{BEAM_OPTIONS_DOC}")


def _option_name(arg: str) -> str | None:
    return arg[2:].split("=", 1)[0] if arg.startswith("--") and len(arg) > 2 else None


class _HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" where the help does not already say it and there is a default to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: {action.default})"


@dataclasses.dataclass(frozen=True)
class JobCommand:
    """A job's command line.

    Attributes:
        prog: how the job is run, for usage lines (``python -m pipelines.build_image_dataset``).
        description: what the job does, first in ``--help``.
        groups: (title, options class) in the order ``--help`` lists them.
        refused: options Beam or a shared class defines that this job does not take, with the reason.
    """

    prog: str
    description: str
    groups: tuple[tuple[str, type[PipelineOptions]], ...]
    refused: tuple[tuple[str, str], ...] = ()

    def help_parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=prog or self.prog, description=self.description, epilog=_EPILOG,
                                         formatter_class=_HelpFormatter)
        refused = dict(self.refused)
        for title, options_class in self.groups:
            group = parser.add_argument_group(title)
            for action in option_actions(options_class):
                if action.dest not in refused:
                    group._add_action(action)
        return parser

    def parse(self, argv: Sequence[str], *, prog: str | None = None) -> PipelineOptions:
        """The job's pipeline options from a command line; ``--help`` prints help and exits.

        Raises:
            SystemExit: 0 after ``--help``; 2 on an unknown or refused option, naming it, the
                closest known option and the way to list them.
        """
        prog = prog or self.prog
        argv = list(argv)
        if "-h" in argv or "--help" in argv:
            self.help_parser(prog).print_help()
            raise SystemExit(0)
        names = [name for name in map(_option_name, argv) if name]  # the options the command line names
        known = set(PipelineOptions([]).get_all_options())
        if any(name not in known for name in names):
            import_runner_options()  # perhaps a Dask runner option (``--dask_client_address``)
            known = set(PipelineOptions([]).get_all_options())
        given = PipelineOptions(argv).get_all_options(retain_unknown_options=True)
        unknown = [name for name in names if name not in known and name in given]
        refused = dict(self.refused)
        problems = [f"{prog}: --{name} is not an option of this job: {refused[name]}"
                    for name in names if name in refused]
        own = [action.dest for title, cls in self.groups for action in option_actions(cls)
               if action.dest not in refused]
        for name in dict.fromkeys(unknown):
            close = _closest(name, own) or _closest(name, sorted(known - set(refused)))
            hint = f"; did you mean --{close}?" if close else ""
            problems.append(f"{prog}: unknown option --{name}{hint}")
        if problems:
            print("\n".join(problems) + f"\n(`{prog} --help` lists the options)", file=sys.stderr)
            raise SystemExit(2)
        return PipelineOptions(argv)


def _closest(name: str, options: Sequence[str]) -> str | None:
    """The known option a mistyped or shortened ``name`` most likely meant (``root`` -> ``dataset_root``)."""
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if close:
        return close[0]
    containing = [option for option in options if name in option.split("_") or option.endswith("_" + name)]
    return min(containing, key=len) if containing else None


def option_actions(options_class: type[PipelineOptions]) -> list[argparse.Action]:
    """The argparse actions an options class defines (through Beam's hook for subclasses, given
    the parser class Beam gives it, which adds ``add_value_provider_argument``)."""
    scratch = _BeamArgumentParser(add_help=False)
    options_class._add_argparse_args(scratch)
    return list(scratch._actions)
