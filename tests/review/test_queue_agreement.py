"""Agreement of a review queue, built through the queue service on a published worked example.

The statistics themselves are tested in test_stats_agreement; here the question is whether a
queue's votes reach them right: standing votes only (a changed vote counts once, a withdrawn
one not at all), adjudications left out, items paired by instance, originals as the reference
and whole instance groups resampled.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sklearn.metrics import cohen_kappa_score
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.accounts.users import Principal, create_user
from app.services.evidence.labels import append_label
from app.services.review import queues
from app.services.review.queue_agreement import queue_agreement
from app.tables import Benchmark, Instance, ReviewQueue, Role

LABEL = "grade"
N = None
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: nominal data,
# four observers, twelve units, missing values; the paper gives alpha = 0.743.
K2011 = {
    "ann-a": ["1", "2", "3", "3", "2", "1", "4", "1", "2", N, N, N],
    "ann-b": ["1", "2", "3", "3", "2", "2", "4", "1", "2", "5", N, "3"],
    "ann-c": [N, "3", "3", "3", "2", "3", "4", "2", "2", "5", "1", N],
    "ann-d": ["1", "2", "3", "3", "2", "4", "4", "1", "2", "5", "1", N],
}
K2011_ALPHA = 0.743
# The label of each unit before review (made up: the paper has no reference coder).
ORIGINAL = ["1", "2", "3", "3", "2", "2", "4", "2", "2", "5", "1", "4"]


def _principal(session: Session, name: str, role: Role) -> Principal:
    user = create_user(session, name, role.value)
    return Principal(user.id, user.name, role, token_id=0)


def _vote(
    session: Session,
    queue: ReviewQueue,
    iid: int,
    who: Principal,
    value: str | None,
    kind: str = "vote",
) -> None:
    seen = queues.label_version(session, iid, queue.label_name)
    queues.record(session, queue, iid, who, kind=kind, value=value, seen_version=seen)


def build_queue(factory: sessionmaker[Session], group: Callable[[int], str]) -> int:
    """A 12-item queue holding the K2011 votes as standing votes; the queue id.

    On the way there annotator C first votes 1 on unit 2 and changes it to the paper's 3,
    A votes on unit 10 and withdraws it, and a reviewer adjudicates unit 12.
    """
    with transaction(factory) as s:
        bench = Benchmark(name="k2011", kind="statement", source="test", data_version=1)
        s.add(bench)
        s.flush()
        ids = []
        for u, original in enumerate(ORIGINAL):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"unit-{u + 1:02d}",
                group_key=group(u),
                payload={"statement": f"unit {u + 1}"},
            )
            s.add(inst)
            s.flush()
            append_label(s, inst.id, LABEL, original, source="import")
            ids.append(inst.id)
        queue = queues.create_queue(
            s,
            bench,
            ids,
            name="k2011",
            label_name=LABEL,
            source="filter",
            choices=["1", "2", "3", "4", "5"],
        )
        people = {name: _principal(s, name, Role.annotator) for name in K2011}
        _vote(s, queue, ids[1], people["ann-c"], "1")
        _vote(s, queue, ids[9], people["ann-a"], "5")
        for name, row in K2011.items():
            for iid, value in zip(ids, row, strict=True):
                if value is not None:
                    _vote(s, queue, iid, people[name], value)
        _vote(s, queue, ids[9], people["ann-a"], None)
        reviewer = _principal(s, "rev", Role.reviewer)
        _vote(s, queue, ids[11], reviewer, "4", kind="adjudication")
        return queue.id


def _agreement(factory: sessionmaker[Session], queue_id: int, **kwargs: int) -> dict:
    with transaction(factory) as s:
        return queue_agreement(s, queues.get_queue(s, queue_id), **kwargs)


def _both_voted(a: str, b: str) -> tuple[list[str], list[str]]:
    kept = [(x, y) for x, y in zip(K2011[a], K2011[b], strict=True) if x and y]
    return [x for x, _ in kept], [y for _, y in kept]


@pytest.fixture
def k2011(factory: sessionmaker[Session]) -> dict:
    queue_id = build_queue(factory, lambda u: f"q{u // 2}")
    return _agreement(factory, queue_id, resamples=400, seed=3)


def test_alpha_is_the_published_value(k2011: dict) -> None:
    assert k2011["annotators"] == sorted(K2011)
    assert k2011["items"] == 12
    alpha = k2011["alpha"]
    # Units 1-11 have two or more votes; unit 12 only B's (the adjudication is no rating).
    assert alpha["n_items"] == 11
    assert alpha["value"] == pytest.approx(K2011_ALPHA, abs=5e-4)
    low, high = alpha["ci"]
    assert low <= alpha["value"] <= high
    assert 0 < alpha["valid_resamples"] <= 400


def test_alpha_equals_the_krippendorff_package(k2011: dict) -> None:
    krippendorff = pytest.importorskip("krippendorff")
    data = [[float("nan") if v is None else float(v) for v in row] for row in K2011.values()]
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert k2011["alpha"]["value"] == pytest.approx(expected, abs=1e-12)


def test_pairwise_kappa_equals_sklearn_on_items_both_voted(k2011: dict) -> None:
    pairs = {(p["a"], p["b"]): p for p in k2011["pairs"]}
    names = sorted(K2011)
    assert list(pairs) == [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    for (a, b), pair in pairs.items():
        x, y = _both_voted(a, b)
        assert pair["n_items"] == len(x)
        assert pair["kappa"] == pytest.approx(cohen_kappa_score(x, y), abs=1e-12)
        low, high = pair["ci"]
        assert low <= pair["kappa"] <= high
    # By hand: A and B share units 1-9 and differ on unit 6 only.
    assert pairs["ann-a", "ann-b"]["n_items"] == 9


def test_agreement_with_the_original_labels(k2011: dict) -> None:
    rows = {r["annotator"]: r for r in k2011["vs_original"]}
    assert list(rows) == sorted(K2011)
    # By hand: A voted on units 1-9 and differs from the original on units 6 and 8.
    assert (rows["ann-a"]["n_items"], rows["ann-a"]["n_agree"]) == (9, 7)
    assert rows["ann-a"]["agreement"] == pytest.approx(7 / 9)
    for name, row in rows.items():
        voted = [(v, o) for v, o in zip(K2011[name], ORIGINAL, strict=True) if v is not None]
        assert row["n_items"] == len(voted)
        assert row["n_agree"] == sum(v == o for v, o in voted)
        expected = cohen_kappa_score([v for v, _ in voted], [o for _, o in voted])
        assert row["kappa"] == pytest.approx(expected, abs=1e-12)
        low, high = row["ci"]
        assert low <= row["kappa"] <= high


def test_one_group_means_no_sampling_variation(factory: sessionmaker[Session]) -> None:
    # With every item in one instance group, each group resample is the whole queue: the
    # intervals collapse to the point values, which they would not if items were resampled.
    queue_id = build_queue(factory, lambda _u: "one question")
    out = _agreement(factory, queue_id, resamples=50)
    assert out["alpha"]["ci"] == pytest.approx([out["alpha"]["value"]] * 2, abs=1e-12)
    for pair in out["pairs"]:
        assert pair["ci"] == pytest.approx([pair["kappa"]] * 2, abs=1e-12)


def test_same_seed_same_intervals(factory: sessionmaker[Session]) -> None:
    queue_id = build_queue(factory, lambda u: f"q{u // 2}")
    first = _agreement(factory, queue_id, resamples=200, seed=7)
    assert _agreement(factory, queue_id, resamples=200, seed=7) == first
    other = _agreement(factory, queue_id, resamples=200, seed=8)
    assert other["alpha"]["value"] == first["alpha"]["value"]
    assert other["alpha"]["ci"] != first["alpha"]["ci"]


def test_queue_without_votes(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        bench = Benchmark(name="quiet", kind="statement", source="test", data_version=1)
        s.add(bench)
        s.flush()
        inst = Instance(benchmark_id=bench.id, external_id="x", group_key="g", payload={})
        s.add(inst)
        s.flush()
        append_label(s, inst.id, LABEL, "1", source="import")
        queue = queues.create_queue(
            s, bench, [inst.id], name="q", label_name=LABEL, source="filter"
        )
        out = queue_agreement(s, queue, resamples=10)
    assert out["annotators"] == [] and out["pairs"] == [] and out["vs_original"] == []
    assert out["alpha"] == {
        "value": None,
        "ci": None,
        "n_items": 0,
        "valid_resamples": 0,
        "reason": None,
    }


def test_figures_are_kept_until_a_vote_changes_them(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agreement section asks on every visit: the second visit with the same votes computes
    # nothing, and a new vote is seen at once.
    import app.services.review.queue_agreement as module

    queue_id = build_queue(factory, lambda u: f"q{u // 2}")
    # Another test (or dialect) in this process may have kept these very figures already.
    monkeypatch.setattr(module, "_kept", module.OrderedDict())
    computed: list[int] = []
    compute = module._compute
    monkeypatch.setattr(module, "_compute", lambda *a, **k: computed.append(1) or compute(*a, **k))
    first = _agreement(factory, queue_id, resamples=100, seed=5)
    assert _agreement(factory, queue_id, resamples=100, seed=5) == first
    assert len(computed) == 1
    with transaction(factory) as s:
        queue = queues.get_queue(s, queue_id)
        unit_11 = queues.item_ids(s, queue)[10]
        who = Principal(create_user(s, "ann-e", "annotator").id, "ann-e", Role.annotator, 0)
        _vote(s, queue, unit_11, who, "1")
    after = _agreement(factory, queue_id, resamples=100, seed=5)
    assert len(computed) == 2 and "ann-e" in after["annotators"]
    assert after["alpha"]["value"] != first["alpha"]["value"]
