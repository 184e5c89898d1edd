"""The disagreements page's view: the query fitted to its mode's form, and the list it gives."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from app.services.disagreements.disagreement_query import DisagreementQuery
from app.services.disagreements.disagreement_results import Save
from app.services.disagreements.lists import DisagreementList, find_disagreements
from app.services.disagreements.modes import DisagreementMode
from app.services.disagreements.modes.base import DetectorKind
from app.services.disagreements.modes.label_errors import LabelErrorsMode
from app.services.evidence.detectors import RANKER_PREFIX
from app.services.metrics.rankers import DETAILS_KEY as RANKERS_KEY
from app.services.table.facets import BenchmarkFacets
from app.tables import Benchmark

LABEL_ERRORS = LabelErrorsMode.name

__all__ = ["DisagreementView", "detector_choices", "disagreement_view", "opening_query"]


@dataclass(frozen=True)
class DisagreementView:
    """What the page shows: the form's state and, once the form is complete, the list.

    ``query`` is the requested one with the detectors the mode cannot take left out
    (``ignored``: detectors of the other kind, or all but the first for a one-detector mode),
    so switching modes in the form never fails on a stale choice. ``missing`` says what must
    still be chosen; ``result`` is ``None`` until nothing is.
    """

    query: DisagreementQuery
    mode: DisagreementMode
    choices: list[str]
    judges: list[str]
    ignored: list[str]
    missing: list[str]
    result: DisagreementList | None


def detector_choices(facets: BenchmarkFacets, kind: DetectorKind) -> list[str]:
    """Names of the benchmark's detectors of ``kind`` (what the form offers)."""
    if kind is DetectorKind.JUDGE:
        return [j.name for j in facets.judges]
    return [d.name for d in facets.scored_detectors]


def _fit(facets: BenchmarkFacets, query: DisagreementQuery) -> tuple[DisagreementQuery, list[str]]:
    """``query`` with only detectors its mode takes, and the ones left out.

    A name the benchmark does not know is kept, so the list reports it as not found.
    """
    spec = query.spec
    choices = set(detector_choices(facets, spec.detectors.kind))
    known = {d.name for d in facets.scored_detectors} | {j.name for j in facets.judges}
    kept = [d for d in dict.fromkeys(query.detectors) if d in choices or d not in known]
    if not spec.detectors.many:
        kept = kept[:1]
    ignored = [d for d in query.detectors if d not in kept]
    return query.with_detectors(kept), ignored


def opening_query(bench: Benchmark, query: DisagreementQuery) -> DisagreementQuery:
    """The list a page opened without a mode shows.

    The benchmark's default label-error ranker in ``label-errors`` mode where one was chosen
    (:func:`app.services.metrics.rankers.default_ranker`), else ``query`` as it is.
    """
    ranker = (bench.details or {}).get(RANKERS_KEY, {}).get("default")
    if not ranker or query.detectors:
        return query
    return replace(query, mode=LABEL_ERRORS, detectors=(RANKER_PREFIX + ranker,))


def disagreement_view(
    session: Session,
    facets: BenchmarkFacets,
    query: DisagreementQuery,
    *,
    save: Save,
    page: tuple[int, int] | None = None,
) -> DisagreementView:
    """The page's view of ``query`` on the benchmark described by ``facets``.

    ``query.label`` should be set (the page's default label set); the list is computed only
    when the form is complete (``save`` stores a list ranked here, ``page`` the positions
    shown: see :func:`~app.services.disagreements.lists.find_disagreements`).
    """
    fitted, ignored = _fit(facets, query)
    missing = fitted.missing()
    return DisagreementView(
        query=fitted,
        mode=fitted.spec,
        choices=detector_choices(facets, fitted.spec.detectors.kind),
        judges=detector_choices(facets, DetectorKind.JUDGE),
        ignored=ignored,
        missing=missing,
        result=(
            None
            if missing
            else find_disagreements(session, facets.summary.name, fitted, save=save, page=page)
        ),
    )
