"""Values of several kinds gathered into one group: a GroupByKey on one key, as ``(kind, value)``.

Publication's inputs (and the spill path's runs) arrive this way rather than as side inputs, which
the Dask runner computes again inside each task that reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

START, RUN, PLAN, SHARD, DEAD = "start", "run", "plan", "shard", "dead"
NEAR, SIGNATURES = "near", "signatures"  # NearTally, SignatureFile (``beam.near_duplicates``)
DIGESTS, DUPLICATES = "digests", "duplicates"  # DigestFile, DuplicateGroups (``beam.duplicates``)
SUMMARY = "summary"  # RecordsSummary: what the records say about the schema (an ``Encoding`` that infers it)


class TaggedStart(beam.PTransform):
    """One ``(None, (START, None))`` element, so that the group exists even when every other kind is
    empty. Made tagged by ``Create`` itself: a ``Create([None])`` and a tag were one ParDo more, and
    Beam pays for each ParDo when it builds the pipeline and sets up every bundle. (Not ``Impulse``:
    Beam's Dask runner has no translation for it.)"""

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        return begin | "Create" >> beam.Create([(None, (START, None))])


def tag(kind: str) -> beam.PTransform:
    """value -> ``(None, (kind, value))``."""
    return beam.Map(lambda value: (None, (kind, value)))


def by_kind(group: tuple[None, Iterable[tuple[str, Any]]], kinds: tuple[str, ...]) -> dict[str, list[Any]]:
    """The values of a one-key group of ``(kind, value)`` elements, listed by kind (each of ``kinds``)."""
    found: dict[str, list[Any]] = {kind: [] for kind in kinds}
    for kind, value in group[1]:
        found[kind].append(value)
    return found
