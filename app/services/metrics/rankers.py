"""Label-error rankers of a choice or answer benchmark, computed and stored as score detectors.

Each ranker is a detector ``ranker:<name>`` whose score says how likely an item's label is
wrong (higher = more suspect), so the metric matrix scores rankers against expert annotations
(e.g. ``defect``) like any other detector. Computing reads the answers once, ranks without a
session, then replaces the rankers' scores on the benchmark in one short write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.answer_matrix import AnswerMatrix, load_answers
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.evidence.detectors import RANKER_KIND, RANKER_PREFIX, ensure_detector
from app.services.evidence.labels import current_label_subquery
from app.sql.bulk import bulk_insert
from app.stats import crowd_rankers, label_errors
from app.stats.metrics import auprc, auroc
from app.tables import Benchmark, Instance, Score, utcnow

__all__ = [
    "RANKERS",
    "RANKER_PREFIX",
    "RankInputs",
    "Ranker",
    "compute_rankers",
    "default_ranker",
    "rank_inputs",
    "store_rankers",
]

DEFAULT_TRAIN_LABEL = "defect"
DETAILS_KEY = "rankers"


@dataclass(frozen=True)
class RankInputs:
    """What the rankers read: the answers, who votes, the local model's probabilities, targets.

    ``voters`` are the answer columns that count as votes (every model: each votes with its
    option probabilities where it gave them, else with its answer); ``local`` is the column of
    the first model (by name) with option probabilities, if any; ``train`` holds the 0/1 expert
    verdicts (NaN where absent) the combiner learns from.
    """

    matrix: AnswerMatrix
    voters: list[int]
    local: int | None
    train_label: str
    train: NDArray[np.float64]

    @cached_property
    def evidence(self) -> ChoiceEvidence:
        """The voters' soft votes on the labelled items of a choice benchmark (computed once)."""
        answers, labels, ok, k = _choice_inputs(self)
        probs = self.matrix.option_probability_array(self.voters)
        everywhere = ok.all()  # no copy of the arrays when every item has a label
        return ChoiceEvidence(
            labels if everywhere else labels[ok],
            ok,
            self.matrix.n_options if everywhere else self.matrix.n_options[ok],
            answers if everywhere else answers[ok],
            k,
            None if probs is None else probs[ok],
        )


@dataclass(frozen=True)
class ChoiceEvidence:
    """The labelled items' evidence: labels, options, hard answers, probabilities (rows ``ok``).

    ``probs`` (n, m, K) is None when no voter gave option probabilities; the soft votes are
    built on first use (the consensus ranker on hard answers needs none).
    """

    labels: NDArray[np.int64]
    ok: NDArray[np.bool_]
    n_options: NDArray[np.int64]
    answers: NDArray[np.int64]
    n_classes: int
    probs: NDArray[np.float64] | None

    @cached_property
    def votes(self) -> crowd_rankers.SoftVotes:
        """Every voter's soft vote (its probabilities, else its answer one-hot)."""
        return crowd_rankers.soft_votes(self.answers, self.probs, self.n_classes)

    def scatter(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Scores of the labelled items as scores of every item (NaN where unlabelled)."""
        return _scatter(self.ok, values)

    def against_share(self) -> NDArray[np.float64]:
        """The share of the votes on the strongest other option (the consensus tie-break)."""
        if self.probs is None:
            return crowd_rankers.hard_consensus(self.answers, self.labels, self.n_classes)[1]
        return crowd_rankers.against_share(self.votes, self.labels)

    def of_label(self, posterior: NDArray[np.float64]) -> NDArray[np.float64]:
        """1 - each item's posterior probability of its label, scattered to every item."""
        return self.scatter(1.0 - posterior[np.arange(self.labels.size), self.labels])


@dataclass(frozen=True)
class Ranker:
    """A registered ranker: its name, what it says, which kinds it ranks, how it computes."""

    name: str
    title: str
    kinds: tuple[str, ...]
    compute: Callable[[RankInputs, dict[str, NDArray[np.float64]]], NDArray[np.float64] | None]
    needs_local: bool = False
    needs_training: bool = False

    @property
    def detector(self) -> str:
        """The detector holding this ranker's scores."""
        return RANKER_PREFIX + self.name


def _choice_inputs(
    inputs: RankInputs,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_], int]:
    m = inputs.matrix
    labels = m.label_codes()
    answers = m.answer_codes(inputs.voters)
    ok = labels >= 0
    return answers, labels, ok, m.n_classes


def _scatter(ok: NDArray[np.bool_], values: NDArray[np.float64]) -> NDArray[np.float64]:
    if values.shape[0] == ok.shape[0]:
        return values  # every item has a label
    out = np.full(ok.shape[0], np.nan)
    out[ok] = values
    return out


def _consensus(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    m = inputs.matrix
    if not m.is_choice:
        correct = m.correct()[:, inputs.voters]
        with np.errstate(invalid="ignore"):
            return 1.0 - np.nanmean(np.where(np.isnan(correct), np.nan, correct), axis=1)
    ev = inputs.evidence
    if ev.labels.size == 0:
        return ev.scatter(np.empty(0))
    # Ties (every model against the label: hundreds of MMLU items) go to the stronger plurality
    # for one other option; no other pair of items changes order.
    if ev.probs is None:
        consensus, share = crowd_rankers.hard_consensus(ev.answers, ev.labels, ev.n_classes)
    else:
        consensus = crowd_rankers.soft_consensus(ev.votes, ev.labels)
        share = ev.against_share()
    return ev.scatter(crowd_rankers.tie_break(consensus, share))


def _weighted(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    ev = inputs.evidence
    # CROWDLAB's classifier term: the models' average probability vector (soft votes).
    scores, _weights = label_errors.weighted_consensus_scores(
        ev.answers, ev.labels, ev.n_classes, crowd_rankers.ensemble_distribution(ev.votes)
    )
    return ev.scatter(crowd_rankers.tie_break(scores, ev.against_share()))


def _cleanlab(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    ev = inputs.evidence
    probs = crowd_rankers.ensemble_distribution(ev.votes)
    return ev.scatter(label_errors.cleanlab_scores(ev.labels, probs))


def _dawid_skene(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    ev = inputs.evidence
    posterior, _confusion = crowd_rankers.dawid_skene(ev.votes, ev.n_options)
    return ev.of_label(posterior)


def _one_coin(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    ev = inputs.evidence
    posterior, _accuracy = crowd_rankers.one_coin(ev.votes, ev.n_options)
    return ev.of_label(posterior)


def _item_response(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    ev = inputs.evidence
    n = ev.labels.size
    correct = np.where(ev.votes.answered, ev.votes.votes[np.arange(n), :, ev.labels], np.nan)
    ability, difficulty = crowd_rankers.rasch(correct)
    # The fitted chance that the ablest model does not give the label.
    return ev.scatter(1.0 / (1.0 + np.exp(ability.max() - difficulty)))


def _local_probs(inputs: RankInputs) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """The local model's option probabilities (n, K) and which rows have them."""
    assert inputs.local is not None
    probs = inputs.matrix.option_probabilities(inputs.local)
    return probs, ~np.isnan(probs).any(axis=1)


def _cleanlab_local(inputs: RankInputs, _: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
    labels = inputs.matrix.label_codes()
    probs, have = _local_probs(inputs)
    ok = have & (labels >= 0)
    return _scatter(ok, label_errors.cleanlab_scores(labels[ok], probs[ok]))


def _combined(
    inputs: RankInputs, done: dict[str, NDArray[np.float64]]
) -> NDArray[np.float64] | None:
    answers, labels, ok, k = _choice_inputs(inputs)
    local = None
    if inputs.local is not None:
        probs, have = _local_probs(inputs)
        # A feature must exist for every trained item; a partial local run is left out.
        if have[ok].all():
            local = probs[ok]
    features = label_errors.ranker_features(
        answers[ok],
        labels[ok],
        k,
        weighted=done["weighted-consensus"][ok],
        cleanlab=done["cleanlab"][ok],
        local_probs=local,
    )
    train = inputs.train[ok]
    trained = ~np.isnan(train)
    if trained.sum() == 0 or len(set(train[trained].tolist())) < 2:
        return None
    groups = np.asarray(inputs.matrix.groups, dtype=object)[ok]
    rows = label_errors.RankerFeatures(features.names, features.values[trained])
    try:
        result = label_errors.combine_rankers(rows, train[trained].astype(int), groups[trained])
    except ValueError as exc:
        # Too few groups (subjects) for grouped folds, or a class confined to one group.
        raise InvalidInput(f"cannot cross-validate on {inputs.train_label!r}: {exc}") from None
    scores = np.full(ok.sum(), np.nan)
    scores[trained] = result.oof
    return _scatter(ok, scores)


RANKERS: dict[str, Ranker] = {
    r.name: r
    for r in (
        Ranker(
            "consensus", "fraction of models against the label", ("choice", "answer"), _consensus
        ),
        Ranker(
            "weighted-consensus",
            "1 - P(label) with models weighted by reliability (CROWDLAB)",
            ("choice",),
            _weighted,
        ),
        Ranker(
            "cleanlab",
            "1 - cleanlab label quality under the models' average probabilities (votes)",
            ("choice",),
            _cleanlab,
        ),
        Ranker(
            "dawid-skene",
            "1 - P(label) under Dawid-Skene (a confusion matrix per model, EM)",
            ("choice",),
            _dawid_skene,
        ),
        Ranker(
            "one-coin",
            "1 - P(label) when each model is right with its own accuracy (EM)",
            ("choice",),
            _one_coin,
        ),
        Ranker(
            "item-response",
            "P(the ablest model misses the label) under a 1PL ability x difficulty fit",
            ("choice",),
            _item_response,
        ),
        Ranker(
            "cleanlab-local",
            "1 - cleanlab label quality under the local model's option probabilities",
            ("choice",),
            _cleanlab_local,
            needs_local=True,
        ),
        Ranker(
            "combined",
            "logistic regression over ranker features, out-of-fold (grouped CV)",
            ("choice",),
            _combined,
            needs_training=True,
        ),
    )
}
"""Every ranker, in computing order (the combiner reads the ones before it)."""


def rank_inputs(
    session: Session, benchmark: str, *, train_label: str = DEFAULT_TRAIN_LABEL
) -> RankInputs:
    """Read what the rankers need (one short read).

    Raises
    ------
    InvalidInput
        If the benchmark has no answers, or its label set ``reference`` has no value.

    """
    bench = get_benchmark(session, benchmark)
    matrix = load_answers(session, bench, arrays=True)
    if not matrix.models:
        raise InvalidInput(f"benchmark {bench.name!r} has no model answers to rank with")
    if all(v is None for v in matrix.labels):
        raise InvalidInput(f"benchmark {bench.name!r} has no reference labels to check")
    local = matrix.with_probabilities()
    # Every model votes: with its option probabilities where it gave them (lm-eval
    # log-likelihoods, the local answer job), else with its answer.
    voters = list(range(len(matrix.models)))
    verdicts = dict(
        session.execute(
            select(Instance.id, current_label_subquery(train_label)).where(
                Instance.benchmark_id == bench.id
            )
        ).all()
    )
    train = np.array([_binary(verdicts.get(int(i))) for i in matrix.instance_ids], dtype=np.float64)
    session.expunge(bench)
    return RankInputs(matrix, voters, local[0] if local else None, train_label, train)


def _binary(value: str | None) -> float:
    return {"1": 1.0, "0": 0.0}.get(value or "", np.nan)


@dataclass
class RankResult:
    """Scores per ranker, rankers skipped (with why) and their AUROC/AUPRC on the verdicts."""

    scores: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    quality: dict[str, dict[str, float | None]] = field(default_factory=dict)


def compute_rankers(inputs: RankInputs, names: Sequence[str] | None = None) -> RankResult:
    """Run the rankers (no session): ``names`` or every ranker that applies.

    Raises
    ------
    InvalidInput
        For an unknown ranker, or one that does not apply to the benchmark (asked for by name).

    """
    kind = inputs.matrix.benchmark.kind
    unknown = [n for n in names or () if n not in RANKERS]
    if unknown:
        raise InvalidInput(
            f"unknown ranker(s) {unknown}; choose from {list(RANKERS)}", field="ranker"
        )
    wanted = set(names) if names else set(RANKERS)
    out = RankResult()
    done: dict[str, NDArray[np.float64]] = {}
    for ranker in RANKERS.values():
        needed = ranker.name in wanted or (
            ranker.name in ("weighted-consensus", "cleanlab") and "combined" in wanted
        )
        if not needed:
            continue
        reason = None
        if kind not in ranker.kinds:
            reason = f"ranks {', '.join(ranker.kinds)} benchmarks"
        elif ranker.needs_local and inputs.local is None:
            reason = "no model answered with option probabilities"
        if reason is None:
            try:
                scores = ranker.compute(inputs, done)
            except InvalidInput as exc:
                scores, reason = None, exc.message
            if scores is None:
                reason = reason or f"needs label set {inputs.train_label!r} with both classes"
            else:
                done[ranker.name] = scores
        if ranker.name not in wanted:
            continue
        if reason is not None:
            if names:
                raise InvalidInput(f"ranker {ranker.name!r} {reason}", field="ranker")
            out.skipped[ranker.name] = reason
            continue
        out.scores[ranker.name] = done[ranker.name]
        out.quality[ranker.name] = _quality(done[ranker.name], inputs.train)
    return out


def _quality(scores: NDArray[np.float64], train: NDArray[np.float64]) -> dict[str, float | None]:
    keep = ~np.isnan(scores) & ~np.isnan(train)
    if keep.sum() == 0 or len(set(train[keep].tolist())) < 2:
        return {"auroc": None, "auprc": None, "n": int(keep.sum())}
    y = train[keep].astype(int)
    return {"auroc": auroc(y, scores[keep]), "auprc": auprc(y, scores[keep]), "n": int(keep.sum())}


def default_ranker(result: RankResult) -> str | None:
    """The ranker with the highest AUPRC on the expert verdicts (consensus when none has one).

    Only rankers that rank the most items compete: one covering fewer items (a partial local
    model run) is scored on another set of items and cannot be compared.
    """
    rated = {n: q for n, q in result.quality.items() if q.get("auprc") is not None}
    if rated:
        most = max(int(q["n"] or 0) for q in rated.values())
        best = {n: float(q["auprc"] or 0.0) for n, q in rated.items() if q["n"] == most}
        return max(sorted(best), key=lambda n: best[n])
    return "consensus" if "consensus" in result.scores else None


def store_rankers(session: Session, inputs: RankInputs, result: RankResult) -> dict[str, Any]:
    """Replace the rankers' scores on the benchmark (one write) and record which is the default.

    Returns
    -------
    dict
        ``rankers`` (name -> stored scores, AUROC and AUPRC against the training label),
        ``skipped`` (name -> why) and ``default``.

    """
    bench = session.get_one(Benchmark, inputs.matrix.benchmark.id)
    now = utcnow()
    on_bench = select(Instance.id).where(Instance.benchmark_id == bench.id)
    summary: dict[str, Any] = {}
    for name, scores in result.scores.items():
        ranker = RANKERS[name]
        detector = ensure_detector(session, ranker.detector, RANKER_KIND, description=ranker.title)
        session.execute(
            delete(Score).where(Score.detector_id == detector.id, Score.instance_id.in_(on_bench))
        )
        rows = [
            (detector.id, int(iid), float(s), {})
            for iid, s in zip(inputs.matrix.instance_ids, scores, strict=True)
            if np.isfinite(s)
        ]
        bulk_insert(
            session,
            Score.__table__,
            ("detector_id", "instance_id", "score", "details"),
            rows,
            {"created_at": now},
        )
        summary[name] = {"scores": len(rows), **result.quality[name]}
    default = default_ranker(result)
    bench.details = {
        **(bench.details or {}),
        DETAILS_KEY: {
            "default": default,
            "train_label": inputs.train_label,
            "quality": {n: summary[n] for n in summary},
        },
    }
    bump_data_version(session, bench)
    return {"rankers": summary, "skipped": result.skipped, "default": default}
