"""Judges against people: each judge's verdicts against the resolved labels of a pairwise label set.

The people's label of a pair is its resolved value (an adjudication, else ``k`` agreeing votes,
else the original: :func:`app.services.evidence.resolution.resolved_labels`), one of ``A``,
``B`` or ``tie``. A judge's verdict is its folded both-order verdict
(:mod:`app.services.evidence.judge_verdicts`). Per judge: Cohen's kappa with a group-bootstrap
interval, the confusion matrix, and the AUROC of the judge's score (P(A is better)) for telling
the pairs people gave to A from those they gave to B, ties left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.accounts.users import Principal
from app.services.evidence.flips import FLIP_PREFIX
from app.services.evidence.judge_verdicts import VERDICTS, judge_verdicts
from app.services.evidence.labels import VOTE
from app.services.evidence.resolution import check_k, resolved_values
from app.services.review import queues
from app.services.table.facets import version_key
from app.sql.cache import VersionedCache
from app.stats.agreement import agreement_with_reference, bootstrap_kappa
from app.stats.bootstrap import group_bootstrap
from app.tables import Benchmark, Detector, Instance, Judgment, LabelEvent, Role, Score

__all__ = [
    "JudgeVsPeople",
    "PeopleAgreement",
    "PeopleView",
    "default_people_label",
    "judges_vs_people",
    "people_label_sets",
    "people_view",
    "queue_people_view",
]

POSITIVE = "A"
"""The people's value the AUROC counts as positive (the judge's score is P(A is better))."""


@dataclass(frozen=True)
class JudgeVsPeople:
    """One judge against the people's resolved labels of the pairs it has a verdict on.

    ``confusion[i][j]`` counts pairs the judge gave ``VERDICTS[i]`` and people
    ``VERDICTS[j]``. ``auroc_n`` counts the pairs the AUROC ranks (a score, and people's
    ``A`` or ``B``); ``*_reason`` says why a value or interval is missing.
    """

    judge: str
    n_items: int
    n_agree: int
    agreement: float | None
    kappa: float | None
    kappa_ci: list[float] | None
    kappa_reason: str | None
    confusion: list[list[int]]
    auroc: float | None
    auroc_ci: list[float] | None
    auroc_reason: str | None
    auroc_n: int


@dataclass(frozen=True)
class PeopleAgreement:
    """Every judge against the people on label set ``label`` (``items``: pairs it resolves)."""

    label: str
    k: int
    items: int
    resamples: int
    seed: int
    judges: list[JudgeVsPeople] = field(default_factory=list)
    values: tuple[str, ...] = VERDICTS
    level: float = 0.95


def people_label_sets(session: Session, bench: Benchmark) -> list[str]:
    """Label sets of ``bench`` whose values are pair verdicts (A, B, tie), most votes first.

    Flip labels are the judges' own and are left out.
    """
    q = (
        select(
            LabelEvent.label_name,
            func.count(func.distinct(LabelEvent.value)).filter(LabelEvent.value.not_in(VERDICTS)),
            func.count().filter(LabelEvent.source == VOTE),
        )
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(Instance.benchmark_id == bench.id, LabelEvent.value.is_not(None))
        .group_by(LabelEvent.label_name)
    )
    usable = [
        (-int(votes), name)
        for name, others, votes in session.execute(q)
        if not others and not name.startswith(FLIP_PREFIX)
    ]
    return [name for _, name in sorted(usable)]


def default_people_label(
    session: Session, bench: Benchmark, label: str | None = None
) -> str | None:
    """``label``, else the pair-verdict label set with the most votes (None: there is none)."""
    if label:
        return label
    found = people_label_sets(session, bench)
    return found[0] if found else None


# Keyed by benchmark version: every vote bumps data_version, so a cached result is current.
_CACHE = VersionedCache(maxsize=32)


def judges_vs_people(
    session: Session,
    bench: Benchmark,
    label: str,
    *,
    k: int = 2,
    instance_ids: Collection[int] | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> PeopleAgreement:
    """Every judge of ``bench`` against the resolved labels of ``label``, with intervals.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    bench : Benchmark
        A benchmark with judgments.
    label : str
        The people's label set (values ``A``, ``B``, ``tie``).
    k : int
        Agreeing voters needed for votes to resolve a label (at least 1).
    instance_ids : collection of int, optional
        Restrict to these pairs (a review queue's items).
    resamples : int
        Group-bootstrap resamples B of each interval (0: point values only); instance groups
        (``group_key``, the question) are resampled whole, with ``seed``.
    seed : int
        Root seed, shared by every judge and statistic.

    Returns
    -------
    PeopleAgreement
        One :class:`JudgeVsPeople` per judge, by name; n is the pairs with both a verdict and
        a resolved label.

    Raises
    ------
    InvalidInput
        ``k`` below 1, or a label set holding values other than ``A``, ``B`` and ``tie``.

    """
    ids_key = None if instance_ids is None else tuple(sorted(instance_ids))
    key = ("judges-vs-people", *version_key(bench), label, k, ids_key, resamples, seed)
    return _CACHE.get_or_compute(
        key, lambda: _compute(session, bench, label, k, instance_ids, resamples, seed)
    )


def _compute(
    session: Session,
    bench: Benchmark,
    label: str,
    k: int,
    instance_ids: Collection[int] | None,
    resamples: int,
    seed: int,
) -> PeopleAgreement:
    people = resolved_values(session, bench.id, label, k=k)
    if instance_ids is not None:
        wanted = set(instance_ids)
        people = {iid: v for iid, v in people.items() if iid in wanted}
    others = sorted({v for v in people.values() if v not in VERDICTS})
    if others:
        raise InvalidInput(
            f"label set {label!r} holds {', '.join(map(repr, others[:5]))}: judges are compared "
            f"with pair labels {', '.join(VERDICTS)}",
            field="label",
        )
    verdicts = judge_verdicts(session, bench.id, people.keys())
    groups = dict(
        session.execute(
            select(Instance.id, Instance.group_key).where(Instance.benchmark_id == bench.id)
        ).all()
    )
    scores = _judge_scores(session, list(verdicts), people.keys())
    rows = [
        _judge_row(name, verdicts[name], people, groups, scores.get(name, {}), resamples, seed)
        for name in verdicts
    ]
    return PeopleAgreement(label, k, len(people), resamples, seed, rows)


def _judge_scores(
    session: Session, judges: list[str], instance_ids: Collection[int]
) -> dict[str, dict[int, float]]:
    """``{judge: {instance id: score}}``: each judge's P(A is better) where it has one."""
    if not judges:
        return {}
    wanted = set(instance_ids)
    q = (
        select(Detector.name, Score.instance_id, Score.score)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name.in_(judges))
    )
    out: dict[str, dict[int, float]] = {}
    for name, iid, score in session.execute(q):
        if iid in wanted:
            out.setdefault(name, {})[iid] = float(score)
    return out


def _judge_row(
    name: str,
    verdicts: dict[int, str],
    people: dict[int, str],
    groups: dict[int, str],
    scores: dict[int, float],
    resamples: int,
    seed: int,
) -> JudgeVsPeople:
    ids = sorted(iid for iid in verdicts if iid in people)
    judge_col = [verdicts[i] for i in ids]
    people_col = [people[i] for i in ids]
    item_groups = [str(groups[i]) for i in ids]
    counts = agreement_with_reference(judge_col, people_col)
    if ids:
        kappa = bootstrap_kappa(judge_col, people_col, item_groups, resamples=resamples, seed=seed)
        kappa_ci, kappa_reason = kappa.ci, kappa.reason
    else:
        kappa_ci, kappa_reason = None, "no pair has both a verdict and a resolved label"
    pairs = Counter(zip(judge_col, people_col, strict=True))
    confusion = [[pairs[(j, p)] for p in VERDICTS] for j in VERDICTS]
    auroc, auroc_ci, auroc_reason, auroc_n = _auroc(people, groups, scores, resamples, seed)
    return JudgeVsPeople(
        judge=name,
        n_items=counts["n_items"],
        n_agree=counts["n_agree"],
        agreement=counts["agreement"],
        kappa=counts["kappa"],
        kappa_ci=kappa_ci,
        kappa_reason=kappa_reason,
        confusion=confusion,
        auroc=auroc,
        auroc_ci=auroc_ci,
        auroc_reason=auroc_reason,
        auroc_n=auroc_n,
    )


def _auroc(
    people: dict[int, str],
    groups: dict[int, str],
    scores: dict[int, float],
    resamples: int,
    seed: int,
) -> tuple[float | None, list[float] | None, str | None, int]:
    """AUROC of the judge's score for people's A against people's B, with its interval."""
    ids = sorted(i for i in scores if people.get(i) in (POSITIVE, "B"))
    if not ids:
        return None, None, "no pair has a score and people's A or B", 0
    y = np.array([people[i] == POSITIVE for i in ids])
    if y.all() or not y.any():
        return None, None, "people chose one side only", len(ids)
    result = group_bootstrap(
        y,
        np.array([scores[i] for i in ids]),
        [str(groups[i]) for i in ids],
        metrics=("auroc",),
        resamples=resamples,
        seed=seed,
    )
    est = result.estimate("auroc")
    return est.value, est.ci, est.reason, len(ids)


# ----------------------------------------------------------------------------- page views


@dataclass(frozen=True)
class PeopleView:
    """The judges-against-people section of a benchmark (or of a queue's items).

    ``labels`` are the label sets it may compare with; ``result`` is None when there is
    nothing to compare (``note`` says why).
    """

    bench: Benchmark
    labels: list[str]
    label: str | None
    k: int
    result: PeopleAgreement | None = None
    note: str = ""
    queue_id: int | None = None


def people_view(
    session: Session,
    bench: Benchmark,
    label: str | None,
    *,
    k: int = 2,
    instance_ids: Collection[int] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    queue_id: int | None = None,
) -> PeopleView:
    """Every judge against the people of ``label`` (default: :func:`default_people_label`).

    Problems of the data (no judge, no pair-verdict label set, a label set of other values)
    are the view's ``note``, not raised: the section says them where the figures would be.
    """
    check_k(k)
    labels = people_label_sets(session, bench)
    chosen = default_people_label(session, bench, label)
    if not _has_judgments(session, bench):
        return PeopleView(bench, labels, chosen, k, note="No judge has judged pairs here.")
    if chosen is None:
        note = "No label set of pair verdicts (A, B or tie) to compare the judges with."
        return PeopleView(bench, labels, chosen, k, note=note)
    try:
        result = judges_vs_people(
            session, bench, chosen, k=k, instance_ids=instance_ids, resamples=resamples, seed=seed
        )
    except InvalidInput as exc:
        return PeopleView(bench, labels, chosen, k, note=exc.message, queue_id=queue_id)
    return PeopleView(bench, labels, chosen, k, result, queue_id=queue_id)


def _has_judgments(session: Session, bench: Benchmark) -> bool:
    q = (
        select(Judgment.id)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(Instance.benchmark_id == bench.id)
        .limit(1)
    )
    return session.scalar(q) is not None


def queue_people_view(
    session: Session, queue_id: int, principal: Principal, *, resamples: int, seed: int = 0
) -> PeopleView:
    """The judges against the people on a queue's items, label set and quorum (reviewers).

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` is not a reviewer: the figures show labels and judges' verdicts, which
        a blind queue hides from annotators (the queue page's agreement is reviewers' too).

    """
    queue = queues.get_queue_for(session, queue_id, principal)
    if not principal.can(Role.reviewer):
        raise queues.NotAssigned("judges against people is a reviewer's overview")
    bench = session.get_one(Benchmark, queue.benchmark_id)
    return people_view(
        session,
        bench,
        queue.label_name,
        k=queue.overlap_k,
        instance_ids=queues.item_ids(session, queue),
        resamples=resamples,
        seed=seed,
        queue_id=queue.id,
    )
