"""The label-errors disagreement mode: a ranker's most suspect items with the models' votes."""

from __future__ import annotations

import csv
import itertools
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.natural_sort import natural_key
from app.services.disagreements.disagreement_query import DisagreementQuery
from app.services.disagreements.disagreement_results import ListRequest, params_key
from app.services.disagreements.lists import find_disagreements
from app.services.disagreements.modes import get_mode
from app.services.disagreements.modes.base import Disagreement
from app.services.disagreements.modes.inputs import benchmark_probabilities
from app.services.disagreements.modes.label_errors import LabelErrorsMode, plurality_against
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.settings import Settings
from app.tables import LabelEvent
from tests.conftest import DATA
from tests.support.auth_support import api_client

SUBJECTS = [
    DATA / "mmlu-redux" / f"{s}.csv" for s in ("astronomy", "college_physics", "world_religions")
]
STEMS = ("astronomy", "college_physics", "college_mathematics")


@pytest.fixture
def ranked(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    with transaction(factory) as s:
        import_mmlu_redux(s, SUBJECTS, "mmlu")
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs, ["consensus"]))
    return factory


def _votes() -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for path in SUBJECTS:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = reader.fieldnames or []
            models = cols[cols.index("error_type") + 1 : cols.index("majority_llm_pred_top_3")]
            for i, row in enumerate(reader, start=1):
                out[f"{path.stem}:{i}"] = Counter(row[m].strip() for m in models if row[m].strip())
    return out


def test_items_ranked_by_the_ranker_with_their_votes(ranked: sessionmaker[Session]) -> None:
    query = DisagreementQuery(mode="label-errors", detectors=("ranker:consensus",), limit=25)
    with ranked() as s:
        found = find_disagreements(s, "mmlu", query)
    assert found.total == 100 * len(SUBJECTS) and len(found.items) == 25
    scores = [d.score for d in found.items]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.5
    votes = _votes()
    for item in found.items:
        assert item.evidence is not None
        assert item.evidence["votes"] == dict(sorted(votes[item.external_id].items()))
        top = votes[item.external_id].most_common(1)[0][0]
        assert votes[item.external_id][item.evidence["plurality"]] == votes[item.external_id][top]
        # The consensus score is the share of the answers that are not the label (its ties
        # broken by the plurality for another option: a shift of at most 1e-3).
        answered = sum(votes[item.external_id].values())
        against = answered - votes[item.external_id][item.label]
        assert item.score == pytest.approx(against / answered, abs=1e-3)
    # Equal scores: the stronger plurality on another option first (issue 21 item 5).
    for a, b in itertools.pairwise(found.items):
        if a.score == b.score:
            assert a.evidence is not None and b.evidence is not None
            assert a.evidence["against_share"] >= b.evidence["against_share"]


def _subject(external_id: str) -> str:
    return external_id.split(":", 1)[0]


def _blocks(items: list[Disagreement]) -> list[list[Disagreement]]:
    """Runs of items with the same score and plurality share (the ties the slices spread)."""
    out: list[list[Disagreement]] = []
    for item in items:
        assert item.evidence is not None
        key = (item.score, item.evidence["against_share"])
        if out and (out[-1][0].score, out[-1][0].evidence["against_share"]) == key:  # type: ignore[index]
            out[-1].append(item)
        else:
            out.append([item])
    return out


def test_ties_go_to_the_stronger_plurality_then_round_robin_over_subjects(
    factory: sessionmaker[Session],
) -> None:
    """Issue 21 item 5: the top of the list was all abstract_algebra (ties by external id)."""
    subjects = [DATA / "mmlu-redux" / f"{s}.csv" for s in ("abstract_algebra", *STEMS)]
    with transaction(factory) as s:
        import_mmlu_redux(s, subjects, "mmlu")
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs, ["consensus"]))
    query = DisagreementQuery(mode="label-errors", detectors=("ranker:consensus",))
    with factory() as s:
        found = find_disagreements(s, "mmlu", query).items
        scores = benchmark_probabilities(s, get_benchmark(s, "mmlu"), "ranker:consensus")
    # The ranker's numbers are its own: the tie-break orders the list, it changes no score.
    assert {d.instance_id: d.score for d in found} == scores
    # Among the items every model doubts (score 1), those where all agree on one other option
    # come first (three abstract_algebra items, all wrong_groundtruth for the experts), then
    # other subjects: ties by external id listed abstract_algebra's five first.
    top = [_subject(d.external_id) for d in found[:5]]
    assert top[:3] == ["abstract_algebra"] * 3 and len(set(top)) > 1, top
    blocks = _blocks(found)
    # The data has ties across subjects for the round-robin to spread.
    assert sum(len({_subject(d.external_id) for d in b}) > 1 for b in blocks) >= 5
    for block in blocks:
        # Round r lists the r-th item (natural id order) of each subject that has one, by name.
        position: dict[str, int] = {}
        for d in sorted(block, key=lambda d: natural_key(d.external_id)):
            subject = _subject(d.external_id)
            position[d.external_id] = sum(_subject(x) == subject for x in position)
        expected = sorted(block, key=lambda d: (position[d.external_id], _subject(d.external_id)))
        assert [d.external_id for d in block] == [d.external_id for d in expected]


def test_the_experts_verdict_is_shown_where_an_errata_label_exists(
    ranked: sessionmaker[Session],
) -> None:
    query = DisagreementQuery(mode="label-errors", detectors=("ranker:consensus",), limit=40)
    with ranked() as s:
        found = find_disagreements(s, "mmlu", query).items
    errata = _errata()
    for item in found:
        assert item.evidence is not None
        assert item.evidence["verdict"] == errata[item.external_id]
        assert f"experts: {errata[item.external_id]}" in item.reason
    assert {d.evidence["verdict"] for d in found if d.evidence} - {"ok"}  # some errors listed


def test_no_verdict_key_without_an_errata_label_set(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        import_mmlu_redux(s, SUBJECTS[:1], "mmlu")
        s.execute(delete(LabelEvent).where(LabelEvent.label_name == "errata"))
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs, ["consensus"]))
    query = DisagreementQuery(mode="label-errors", detectors=("ranker:consensus",), limit=5)
    with factory() as s:
        found = find_disagreements(s, "mmlu", query).items
    assert found and all(d.evidence is not None and "verdict" not in d.evidence for d in found)


def test_plurality_against_the_label() -> None:
    assert plurality_against(Counter({"A": 1, "B": 3}), "A") == ("B", 0.75)
    # Two options level: the first by letter, at its own share.
    assert plurality_against(Counter({"A": 1, "C": 2, "B": 2}), "A") == ("B", 0.4)
    assert plurality_against(Counter({"A": 4}), "A") == (None, 0.0)
    assert plurality_against(Counter(), "A") == (None, 0.0)
    assert plurality_against(Counter({"B": 2}), None) == ("B", 1.0)


def test_a_revised_ranking_is_kept_under_a_new_key(
    ranked: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ranked() as s:
        bench = get_benchmark(s, "mmlu")
        spec = get_mode("label-errors")
        request = ListRequest.of(spec, ["ranker:consensus"], "reference", None, {})
        key = params_key(bench, request)
        monkeypatch.setattr(LabelErrorsMode, "ranking_revision", 2)
        assert params_key(bench, request) != key


def _errata() -> dict[str, str | None]:
    out = {}
    for path in SUBJECTS:
        with path.open(newline="", encoding="utf-8") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=1):
                out[f"{path.stem}:{i}"] = row["error_type"] or None
    return out


def test_only_on_choice_and_answer_benchmarks(ranked: sessionmaker[Session]) -> None:
    from app.ingest.statements import import_statements

    with transaction(ranked) as s:
        import_statements(s, DATA / "truth" / "cities.csv", benchmark="cities")
    query = DisagreementQuery(mode="label-errors", detectors=("ranker:consensus",))
    with ranked() as s, pytest.raises(InvalidInput, match="choice or answer benchmarks"):
        find_disagreements(s, "cities", query)


def test_the_page_opens_with_the_default_ranker_and_builds_a_queue(
    ranked: sessionmaker[Session], settings: Settings
) -> None:
    with api_client(settings, role="admin") as client:
        page = client.get("/benchmarks/mmlu/disagreements")
        api = client.get(
            "/api/benchmarks/mmlu/disagreements",
            params={"mode": "label-errors", "detector": "ranker:consensus", "limit": 5},
        )
    assert page.status_code == 200 and api.status_code == 200
    assert '<option value="label-errors" selected' in page.text
    assert '<option value="ranker:consensus" selected' in page.text
    assert 'class="vote' in page.text  # the evidence chips
    items: list[dict[str, Any]] = api.json()["items"]
    assert len(items) == 5 and all("votes" in i["evidence"] for i in items)
    assert items[0]["external_id"] in page.text


def test_the_page_shows_one_score_column_the_verdicts_and_the_selection_form(
    ranked: sessionmaker[Session], settings: Settings
) -> None:
    with api_client(settings, role="reviewer") as client:
        page = client.get("/benchmarks/mmlu/disagreements")
    assert page.status_code == 200
    head = page.text.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert ">Score</th>" in head and "Confidence" not in head
    assert ">Experts</th>" in head
    assert 'data-form="disagreement-selection"' in page.text
    assert page.text.count('name="item"') == 100  # a box per row of the first page
    assert 'class="select-all"' in page.text
