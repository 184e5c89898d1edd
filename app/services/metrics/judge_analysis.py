"""Several judges on one analysis set: their verdict tables, the shared pairs and shared folds.

Comparing two judges' flip probes (or bias figures) is only fair on the same pairs and, for
probes, the same outer folds. Following the flip paper's analysis: the analysis set is the pairs
that every chosen judge judged validly in both orders, and its outer folds are grouped (a group
never straddles a split) and stratified by the pair's slice and by how many of the chosen judges
flip it, so every fold sees the hard pairs in proportion. A judge's probe is then refused, with
the reason, when its flip rate makes it not estimable (:mod:`app.stats.estimability`).

:func:`judge_verdicts` reads each judge's two orders once (the bias panel reads them too);
:func:`analysis_set` intersects them; :func:`shared_folds` makes the folds every judge's probe
and baselines use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_value, is_two_order_judge
from app.services.evidence.judge_scores import judge_orders
from app.services.evidence.labelled_items import MISSING_SLICE, known_names, slice_text
from app.stats.cv_splits import Split, strata_folds
from app.stats.estimability import probe_refusal
from app.tables import Choice, Detector, Instance, Order

__all__ = [
    "CHOICES",
    "AnalysisSet",
    "JudgeVerdicts",
    "PairFacts",
    "SharedFolds",
    "analysis_set",
    "build_analysis_set",
    "judge_verdicts",
    "shared_folds",
]

_AB, _BA = Order.AB.value, Order.BA.value
CHOICES: tuple[str, ...] = (Choice.A.value, Choice.B.value, Choice.tie.value)
"""The choices a retained verdict can hold (identities), in display order."""


@dataclass(frozen=True)
class JudgeVerdicts:
    """One judge's verdicts on its retained pairs (valid in both orders), by instance id.

    ``judged`` counts the pairs with an AB or a BA judgment; ``choices`` maps each retained
    pair to its ``(AB choice, BA choice)`` identities (``A``, ``B`` or ``tie``).
    """

    judge: str
    judged: int
    choices: dict[int, tuple[str, str]]

    @property
    def retained(self) -> int:
        """Pairs valid in both orders."""
        return len(self.choices)


@dataclass(frozen=True)
class PairFacts:
    """What the panel and the folds read of each judged pair: group, slice, response lengths.

    ``model_a`` and ``model_b`` name the models behind the two responses where the importer
    recorded them (MT-Bench, Arena-Hard), for the win rates of the judge's verdicts.
    """

    group: str
    slice: str
    external_id: str
    length_a: int
    length_b: int
    model_a: str | None = None
    model_b: str | None = None


def _two_order_judges(session: Session, benchmark_id: int) -> dict[int, str]:
    """Detector id -> name of every judge with AB and BA judgments (no reward model)."""
    orders = judge_orders(session, benchmark_id, orders=(_AB, _BA))
    if not orders:
        return {}
    rows = session.execute(
        select(Detector.id, Detector.name, Detector.kind).where(Detector.id.in_(list(orders)))
    )
    return {
        i: name
        for i, name, kind in rows
        if is_two_order_judge(kind, {o for per in orders[i].values() for o in per})
    }


def judge_verdicts(
    session: Session,
    benchmark: str,
    judges: Sequence[str] | None = None,
    slice_field: str | None = None,
) -> tuple[list[JudgeVerdicts], dict[int, PairFacts]]:
    """Each chosen judge's retained verdicts and the facts of every pair any of them judged.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    judges
        Judge (detector) names in the order wanted; every two-order judge by name when None.
    slice_field
        Payload field naming each pair's slice (none: every pair in ``"(none)"``).

    Returns
    -------
    (list of JudgeVerdicts, dict of instance id to PairFacts)
        One entry per judge, in the order asked; the facts of every judged pair.

    Raises
    ------
    NotFound
        Unknown benchmark.
    InvalidInput
        A name that is no two-order judge here (listing those that are), a name given twice,
        or a benchmark without any.

    """
    bench = get_benchmark(session, benchmark)
    known = _two_order_judges(session, bench.id)
    by_name = {name: i for i, name in known.items()}
    if not known:
        raise InvalidInput(f"no judge has judged {benchmark!r} in both orders", field="judge")
    names = sorted(by_name) if not judges else list(judges)
    if len(set(names)) != len(names):
        raise InvalidInput("a judge is named twice", field="judge")
    for name in names:
        if name not in by_name:
            raise InvalidInput(
                f"{name!r} has not judged {benchmark!r} in both orders; judges: "
                f"{known_names(sorted(by_name))}",
                field="judge",
            )
    orders = judge_orders(session, bench.id, [by_name[n] for n in names], (_AB, _BA))
    out: list[JudgeVerdicts] = []
    seen: set[int] = set()
    for name in names:
        by_instance = orders.get(by_name[name], {})
        seen.update(by_instance)
        choices: dict[int, tuple[str, str]] = {}
        for instance_id, per in by_instance.items():
            ab, ba = per.get(_AB), per.get(_BA)
            if flip_value(ab and ab.choice, ba and ba.choice) is not None:
                assert ab is not None and ba is not None
                choices[instance_id] = (ab.choice, ba.choice)
        out.append(JudgeVerdicts(name, len(by_instance), choices))
    return out, _pair_facts(session, sorted(seen), slice_field)


def _pair_facts(
    session: Session, instance_ids: list[int], slice_field: str | None
) -> dict[int, PairFacts]:
    facts: dict[int, PairFacts] = {}
    # In chunks: a long IN list is slow to plan and SQLite limits bound parameters.
    for start in range(0, len(instance_ids), 5000):
        chunk = instance_ids[start : start + 5000]
        q = select(Instance.id, Instance.group_key, Instance.external_id, Instance.payload).where(
            Instance.id.in_(chunk)
        )
        for i, group, ext, payload in session.execute(q):
            payload = payload or {}
            facts[i] = PairFacts(
                group=group,
                slice=slice_text(payload.get(slice_field)) if slice_field else MISSING_SLICE,
                external_id=ext,
                length_a=len(str(payload.get("response_a") or "")),
                length_b=len(str(payload.get("response_b") or "")),
                model_a=_model_name(payload.get("model_a")),
                model_b=_model_name(payload.get("model_b")),
            )
    return facts


def _model_name(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class AnalysisSet:
    """The pairs every chosen judge judged validly in both orders, in instance-id order.

    Attributes
    ----------
    benchmark : str
    judges : tuple of str
        The chosen judges, in the order asked.
    instance_ids : ndarray of int64, shape (n,)
    external_ids : list of str, length n
    groups : ndarray of object, shape (n,)
        Each pair's group (the resampling and splitting unit).
    slices : ndarray of object, shape (n,)
        Each pair's slice (``"(none)"`` without a slice field).
    flips : ndarray of bool, shape (J, n)
        ``flips[j, i]``: judge ``j`` flips pair ``i`` (its AB and BA identities differ).
    ab_choices : ndarray of object, shape (J, n)
        Each judge's AB-order choice (``A``, ``B`` or ``tie``).
    judged, retained : dict of str to int
        Per judge: pairs with an AB or BA judgment, and those valid in both orders.
    slice_field : str or None

    """

    benchmark: str
    judges: tuple[str, ...]
    instance_ids: NDArray[np.int64]
    external_ids: list[str]
    groups: NDArray[np.object_]
    slices: NDArray[np.object_]
    flips: NDArray[np.bool_]
    ab_choices: NDArray[np.object_]
    judged: dict[str, int]
    retained: dict[str, int]
    slice_field: str | None

    @property
    def n(self) -> int:
        """Pairs in the set."""
        return int(self.instance_ids.size)

    @property
    def flip_counts(self) -> NDArray[np.int64]:
        """How many of the chosen judges flip each pair, shape (n,)."""
        return self.flips.sum(axis=0).astype(np.int64)

    @property
    def strata(self) -> NDArray[np.object_]:
        """Each pair's fold stratum: ``"<slice>::<judges that flip it>"``, shape (n,)."""
        counts = self.flip_counts
        return np.array([f"{s}::{c}" for s, c in zip(self.slices, counts, strict=True)], object)

    def flips_of(self, judge: str) -> NDArray[np.bool_]:
        """The flip labels of one chosen judge, shape (n,)."""
        return self.flips[self.judges.index(judge)]

    def retention(self) -> list[dict[str, object]]:
        """Per judge: pairs judged, retained (valid in both orders) and kept in the set."""
        return [
            {
                "judge": j,
                "judged": self.judged[j],
                "retained": self.retained[j],
                "in_set": self.n,
                "share_in_set": self.n / self.judged[j] if self.judged[j] else None,
            }
            for j in self.judges
        ]


def analysis_set(
    session: Session,
    benchmark: str,
    judges: Sequence[str] | None = None,
    *,
    slice_field: str | None = None,
) -> AnalysisSet:
    """The shared pairs of the chosen judges (valid in both orders for every one of them).

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    judges
        Judge names; every two-order judge of the benchmark when None or empty.
    slice_field
        Payload field whose value stratifies the folds (none: one slice).

    Returns
    -------
    AnalysisSet

    Raises
    ------
    NotFound, InvalidInput
        As :func:`judge_verdicts`; InvalidInput also when the judges share no pair.

    """
    verdicts, facts = judge_verdicts(session, benchmark, judges, slice_field)
    return build_analysis_set(benchmark, verdicts, facts, slice_field)


def build_analysis_set(
    benchmark: str,
    verdicts: Sequence[JudgeVerdicts],
    facts: dict[int, PairFacts],
    slice_field: str | None,
) -> AnalysisSet:
    """:func:`analysis_set` from verdicts already read (the panel reads them once for both)."""
    shared = sorted(set.intersection(*(set(v.choices) for v in verdicts)))
    if not shared:
        names = ", ".join(v.judge for v in verdicts)
        raise InvalidInput(f"{names} share no pair valid in both orders", field="judge")
    return AnalysisSet(
        benchmark=benchmark,
        judges=tuple(v.judge for v in verdicts),
        instance_ids=np.asarray(shared, dtype=np.int64),
        external_ids=[facts[i].external_id for i in shared],
        groups=np.array([facts[i].group for i in shared], dtype=object),
        slices=np.array([facts[i].slice for i in shared], dtype=object),
        flips=np.array(
            [[v.choices[i][0] != v.choices[i][1] for i in shared] for v in verdicts], dtype=bool
        ).reshape(len(verdicts), len(shared)),
        ab_choices=np.array(
            [[v.choices[i][0] for i in shared] for v in verdicts], dtype=object
        ).reshape(len(verdicts), len(shared)),
        judged={v.judge: v.judged for v in verdicts},
        retained={v.judge: v.retained for v in verdicts},
        slice_field=slice_field,
    )


@dataclass(frozen=True)
class SharedFolds:
    """The outer folds of an analysis set, and each judge's probe refusal on them.

    ``fold[i]`` is the test fold of pair ``i``; ``splits`` the ``(train_idx, test_idx)``
    pairs (indices into the analysis set) every judge's probe and baselines use;
    ``refusals[judge]`` says why that judge's probe is not fitted (``None``: it is).
    """

    n_splits: int
    seed: int
    fold: NDArray[np.intp]
    splits: list[Split]
    refusals: dict[str, str | None]

    def as_dict(self, aset: AnalysisSet) -> dict[str, object]:
        """The JSON of the folds: sizes, flips per fold per judge, refusals."""
        return {
            "n_splits": self.n_splits,
            "seed": self.seed,
            "sizes": [int(test.size) for _, test in self.splits],
            "groups": [int(np.unique(aset.groups[test]).size) for _, test in self.splits],
            "flips": {
                j: [int(aset.flips_of(j)[test].sum()) for _, test in self.splits]
                for j in aset.judges
            },
            "refusals": dict(self.refusals),
        }


def shared_folds(aset: AnalysisSet, n_splits: int = 5, seed: int = 0) -> SharedFolds:
    """Grouped outer folds stratified by slice and flip count, shared by every judge.

    Parameters
    ----------
    aset
        The analysis set.
    n_splits
        Number of outer folds (at least 2).
    seed
        Seed of the group shuffle.

    Returns
    -------
    SharedFolds
        The folds (:func:`app.stats.cv_splits.strata_folds` over :attr:`AnalysisSet.strata`)
        and each judge's estimability verdict (:func:`app.stats.estimability.probe_refusal`).

    Raises
    ------
    InvalidInput
        Fewer groups in the set than folds.

    """
    if n_splits < 2:
        raise InvalidInput("needs at least 2 outer folds", field="outer")
    try:
        splits = strata_folds(aset.strata, aset.groups, n_splits, seed)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="outer") from exc
    fold = np.full(aset.n, -1, dtype=np.intp)
    for k, (_, test) in enumerate(splits):
        fold[test] = k
    refusals = {j: probe_refusal(aset.flips_of(j), splits) for j in aset.judges}
    return SharedFolds(n_splits, seed, fold, splits, refusals)
