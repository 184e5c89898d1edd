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
from app.services.metrics.verdicts import verdict_vector
from app.sql.bulk import bulk_insert
from app.stats import combiner, crowd_rankers, label_errors
from app.stats.metrics import auprc, auroc
from app.tables import Benchmark, Instance, Score, utcnow

__all__ = [
    "DEFAULT_RULE",
    "RANKERS",
    "RANKER_PREFIX",
    "RankInputs",
    "Ranker",
    "compute_rankers",
    "default_ranker",
    "frozen_combiner",
    "rank_inputs",
    "ranker_summary",
    "store_rankers",
]

DEFAULT_TRAIN_LABEL = "defect"
DETAILS_KEY = "rankers"


@dataclass(frozen=True)
class RankInputs:
    """What the rankers read: the answers, who votes, the local model's probabilities, targets.

    ``voters`` are the answer columns that count as votes (every model: each votes with its
    option probabilities where it gave them, else with its answer); ``local`` is the column of
    the first model (by name) with option probabilities, if any; ``train`` holds the 0/1
    verdicts (NaN where absent) the combiner learns from: resolved review where an item was
    reviewed, else the expert label set ``train_label``
    (:mod:`app.services.metrics.verdicts`). ``frozen`` is a frozen combiner to apply instead
    of fitting one (``--apply-from``); ``fitted`` is where the combiner leaves what it learnt
    or applied (its artifact and fingerprint), for :func:`store_rankers` to keep.
    """

    matrix: AnswerMatrix
    voters: list[int]
    local: int | None
    train_label: str
    train: NDArray[np.float64]
    frozen: dict[str, Any] | None = None
    fitted: dict[str, Any] = field(default_factory=dict)

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
    """The learned combiner: out-of-fold on verdict items, the refit on every other item.

    With ``inputs.frozen`` it applies that combiner and fits nothing.
    """
    answers, labels, ok, k = _choice_inputs(inputs)
    m = inputs.matrix
    # Every ranker computed before this one is a feature, except those that learn from the
    # verdicts themselves (their scores on the training items would carry the verdicts).
    features = combiner.combiner_features(
        answers[ok],
        labels[ok],
        k,
        models=[m.models[j] for j in inputs.voters],
        groups=np.asarray(m.groups, dtype=object)[ok],
        scores={n: s[ok] for n, s in done.items() if not RANKERS[n].needs_training},
    )
    if inputs.frozen is not None:
        frozen = combiner.Combiner.from_dict(inputs.frozen["combiner"])
        inputs.fitted["combined"] = {**inputs.frozen, "applied": True}
        return _scatter(ok, frozen.predict(features))
    train = inputs.train[ok]
    trained = ~np.isnan(train)
    if trained.sum() == 0 or len(set(train[trained].tolist())) < 2:
        return None
    groups = np.asarray(m.groups, dtype=object)[ok]
    rows = label_errors.RankerFeatures(features.names, features.values[trained])
    try:
        fit = combiner.fit_combiner(rows, train[trained].astype(int), groups[trained])
    except ValueError as exc:
        # A class confined to one fold's training part even with items as groups.
        raise InvalidInput(f"cannot cross-validate on {inputs.train_label!r}: {exc}") from None
    scores = fit.combiner.predict(features)
    scores[trained] = fit.oof
    ids = m.instance_ids[ok][trained]
    inputs.fitted["combined"] = {
        "combiner": fit.combiner.to_dict(),
        "fingerprint": combiner.fingerprint(
            m.benchmark.name,
            inputs.train_label,
            ids,
            train[trained].astype(int),
            fit.combiner.names,
        ),
        "folds": fit.folds,
        "applied": False,
    }
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
            "logistic regression over every ranker, the votes, which models disagree and "
            "slice statistics: out-of-fold on verdict items (grouped CV), refit on the rest",
            ("choice",),
            _combined,
            needs_training=True,
        ),
    )
}
"""Every ranker, in computing order (the combiner reads the ones before it)."""


def rank_inputs(
    session: Session,
    benchmark: str,
    *,
    train_label: str = DEFAULT_TRAIN_LABEL,
    apply_from: str | None = None,
) -> RankInputs:
    """Read what the rankers need (one short read).

    ``apply_from`` names a benchmark whose frozen combiner scores this one (nothing is fit).

    Raises
    ------
    InvalidInput
        If the benchmark has no answers, its label set ``reference`` has no value, or
        ``apply_from`` has no frozen combiner.

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
    frozen = frozen_combiner(session, apply_from) if apply_from else None
    train, _errata = verdict_vector(session, bench.id, matrix.instance_ids, train_label)
    session.expunge(bench)
    return RankInputs(
        matrix, voters, local[0] if local else None, train_label, train, frozen=frozen
    )


def frozen_combiner(session: Session, benchmark: str) -> dict[str, Any]:
    """The frozen combiner stored with ``benchmark``'s rankers (artifact and fingerprint).

    Raises
    ------
    InvalidInput
        If the benchmark's combiner was never fitted.

    """
    bench = get_benchmark(session, benchmark)
    stored = ((bench.details or {}).get(DETAILS_KEY) or {}).get("combiner")
    if not stored or "combiner" not in stored:
        raise InvalidInput(
            f"benchmark {bench.name!r} has no frozen combiner: rank its errors with verdicts "
            "first (appellate rank-errors BENCH --train-label LABEL)",
            field="apply_from",
        )
    return {k: stored[k] for k in ("combiner", "fingerprint", "folds") if k in stored}


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
        # The combiner reads every ranker that does not learn from the verdicts.
        needed = ranker.name in wanted or ("combined" in wanted and not ranker.needs_training)
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


DEFAULT_RULE = (
    "fixed rule, no label read: plain consensus (the fraction of models against the label)"
)
"""How :func:`default_ranker` chooses (shown on the metrics page and stated in the README)."""


def default_ranker(result: RankResult) -> str | None:
    """The default ranker by :data:`DEFAULT_RULE` (None when consensus was not computed).

    Choosing the ranker with the best AUPRC on the expert verdicts would report a number
    selected on its own test set; the rule is fixed in advance instead, so no evaluation label
    can change the default. Consensus, because on MMLU-Redux subjects held out from training
    the learned combiner did not beat it (``benchmarks/combiner_transfer.py``).
    """
    return "consensus" if "consensus" in result.scores else None


def ranker_summary(session: Session, benchmark: str) -> dict[str, Any] | None:
    """The benchmark's default ranker, the rule that chose it and its combiner's fingerprint.

    None before the benchmark's errors were ranked.
    """
    stored = (get_benchmark(session, benchmark).details or {}).get(DETAILS_KEY)
    if not stored:
        return None
    combined = stored.get("combiner") or {}
    return {
        "default": stored.get("default"),
        "rule": stored.get("rule") or "the best AUPRC on the training verdicts (before rules)",
        "fingerprint": combined.get("fingerprint"),
        "applied": bool(combined.get("applied")),
    }


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
    before = (bench.details or {}).get(DETAILS_KEY) or {}
    # A run of some rankers only (a queue's re-ranking) keeps the default and the others.
    default = default_ranker(result) or before.get("default")
    fitted = inputs.fitted.get("combined")
    # A run without the combiner keeps the one fitted before (another benchmark may apply it).
    kept = fitted if "combined" in result.scores else before.get("combiner")
    record: dict[str, Any] = {
        "default": default,
        "rule": DEFAULT_RULE,
        "train_label": inputs.train_label,
        "quality": {**(before.get("quality") or {}), **summary},
    }
    if kept:
        record["combiner"] = kept
    bench.details = {**(bench.details or {}), DETAILS_KEY: record}
    bump_data_version(session, bench)
    out: dict[str, Any] = {"rankers": summary, "skipped": result.skipped, "default": default}
    if fitted:
        out["combiner"] = {k: fitted[k] for k in ("fingerprint", "folds", "applied") if k in fitted}
    return out
