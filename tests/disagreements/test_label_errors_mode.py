"""The label-errors disagreement mode: a ranker's most suspect items with the models' votes."""

from __future__ import annotations

import csv
from collections import Counter
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.disagreements.disagreement_query import DisagreementQuery
from app.services.disagreements.lists import find_disagreements
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.settings import Settings
from tests.conftest import DATA
from tests.support.auth_support import api_client

SUBJECTS = [
    DATA / "mmlu-redux" / f"{s}.csv" for s in ("astronomy", "college_physics", "world_religions")
]


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
        # The consensus score is the share of the answers that are not the label.
        answered = sum(votes[item.external_id].values())
        against = answered - votes[item.external_id][item.label]
        assert item.score == pytest.approx(against / answered)
    ties = [(d.score, d.external_id) for d in found.items]
    assert ties == sorted(ties, key=lambda t: (-t[0], t[1]))  # ties by external id


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
