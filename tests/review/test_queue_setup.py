"""Setting a queue up (issue 21 item 3): kind-fitting tags, an explicit size, the item's evidence.

Tags fit the benchmark kind and each queue may set its own; the size is explicit, with a
preview of how many items match; the adjudication view shows the models' answers and the
rankers' scores on a choice item.

Before: every queue offered one tag list (pairwise tags such as "persona not adopted" on MMLU),
a disagreement list was silently cut at 200 items (a filter not at all), and the item page showed
neither the models' answers nor the rankers' scores.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.main import create_app
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.services.review import queues
from app.services.review.queue_sources import MAX_SIZE, source_items
from app.settings import Settings
from app.tables import BenchmarkKind, Detector, Instance, LabelEvent, Prediction, QueueItem, Score
from tests.conftest import DATA
from tests.support.auth_support import browser_session

SUBJECT = DATA / "mmlu-redux" / "astronomy.csv"
RANKED = "mode=label-errors&detector=ranker:consensus"
CHOICE_TAGS = [
    "wrong ground truth",
    "no correct answer",
    "multiple correct answers",
    "bad question clarity",
    "bad options clarity",
]


@pytest.fixture
def mmlu(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """One MMLU-Redux subject (100 items, 14 models' answers), its errors ranked."""
    with transaction(factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs))
    return factory


@pytest.fixture
def reviewer(settings: Settings, mmlu: sessionmaker[Session]) -> Iterator[tuple[TestClient, str]]:
    with TestClient(create_app(settings)) as client:
        yield client, browser_session(client, settings, "rita", "reviewer")


def _create(client: TestClient, csrf: str, **fields: Any) -> Any:
    data = {
        "csrf_token": csrf, "benchmark": "mmlu", "name": "check", "label": "reference",
        "source": "filter", "query": "", "overlap_k": "1", **fields,
    }  # fmt: skip
    return client.post("/queues", data=data, follow_redirects=False)


def _queue_id(made: Any) -> int:
    assert made.status_code == 303, made.text
    return int(made.headers["location"].rsplit("/", 1)[1])


def _version(page: str) -> int:
    found = re.search(r'name="version" value="(\d+)"', page)
    assert found is not None
    return int(found.group(1))


def test_default_tags_fit_the_benchmark_kind() -> None:
    choice = queues.default_tags(BenchmarkKind.choice)
    assert choice[: len(CHOICE_TAGS)] == CHOICE_TAGS
    assert "persona not adopted" not in choice
    assert "persona not adopted" not in queues.default_tags(BenchmarkKind.answer)
    assert "persona not adopted" in queues.default_tags(BenchmarkKind.statement)
    assert "both wrong" in queues.default_tags(BenchmarkKind.pairwise)


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ([f"t{i}" for i in range(queues.MAX_TAGS + 1)], "at most"),
        (["x" * (queues.MAX_TAG_LENGTH + 1)], "characters"),
        (["nul\x00tag"], "control character"),
    ],
)
def test_unfit_tags_are_refused(tags: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        queues.check_tags(tags)
    assert queues.check_tags([" a ", "", "b", "a"]) == ["a", "b"]


def test_a_choice_queue_offers_the_choice_taxonomy_or_its_own_tags(
    reviewer: tuple[TestClient, str], mmlu: sessionmaker[Session]
) -> None:
    client, csrf = reviewer
    form = client.get("/benchmarks/mmlu/queues/new?source=filter")
    assert form.status_code == 200
    assert "bad options clarity" in form.text and "persona not adopted" not in form.text
    # No tags posted: the kind's defaults.
    plain = _queue_id(_create(client, csrf, name="defaults"))
    assert client.get(f"/api/queues/{plain}").json()["tags"] == queues.default_tags("choice")
    item = client.get(f"/queues/{plain}/next")
    assert "bad options clarity" in item.text and "persona not adopted" not in item.text
    # The queue's own tags, one per line (blanks and repeats dropped).
    own = _queue_id(
        _create(client, csrf, name="own", tags="figure missing\r\n\r\nwrong ground truth\n")
    )
    assert client.get(f"/api/queues/{own}").json()["tags"] == [
        "figure missing", "wrong ground truth",
    ]  # fmt: skip
    page = client.get(f"/queues/{own}/next")
    iid = int(str(page.url).rsplit("/", 1)[1])
    assert 'value="figure missing"' in page.text and 'value="no correct answer"' not in page.text
    vote = f"/queues/{own}/items/{iid}/vote"
    refused = client.post(
        vote,
        data={"csrf_token": csrf, "value": "A", "version": _version(page.text),
              "tags": ["no correct answer"]},
        follow_redirects=False,
    )  # fmt: skip
    assert refused.status_code == 422 and "unknown defect tag" in refused.text
    voted = client.post(
        vote,
        data={"csrf_token": csrf, "value": "A", "version": _version(page.text),
              "tags": ["figure missing"]},
        follow_redirects=False,
    )  # fmt: skip
    assert voted.status_code == 303, voted.text
    with mmlu() as s:
        tags = s.scalars(
            select(LabelEvent.tags).where(
                LabelEvent.instance_id == iid, LabelEvent.source == "vote"
            )
        ).all()
    assert tags == [["figure missing"]]
    # Unfit tags refuse the whole queue.
    assert _create(client, csrf, name="bad", tags="ok\nx\x01y").status_code == 422


def test_the_queue_takes_the_first_size_items_of_what_matches(
    reviewer: tuple[TestClient, str], mmlu: sessionmaker[Session]
) -> None:
    client, csrf = reviewer
    with mmlu() as s:
        total = s.scalar(select(func.count()).select_from(Instance))
        bench = get_benchmark(s, "mmlu")
        by_id = list(s.scalars(select(Instance.id).order_by(Instance.external_id)))
        # A disagreement list (label-errors by the default ranker): its length, then its top.
        listed = source_items(s, bench, "disagreements", RANKED, 1000)
        top = source_items(s, bench, "disagreements", RANKED, 7)
        capped = source_items(s, bench, "disagreements", RANKED + "&limit=5", 7)
    assert total == 100 and listed.matching == len(listed.ids) > 7
    assert top.matching == listed.matching and top.ids == listed.ids[:7]
    assert (capped.matching, capped.ids) == (5, listed.ids[:5])
    # The form shows what its query matches, and the preview follows the size.
    form = client.get("/benchmarks/mmlu/queues/new?source=filter&query=")
    assert "100</strong> items match; the queue takes all" in form.text
    assert 'name="size"' in form.text
    preview = client.get(
        "/benchmarks/mmlu/queues/preview",
        params={"source": "filter", "query": "", "size": "30"},
        headers={"HX-Request": "true"},
    )
    assert preview.status_code == 200 and "<html" not in preview.text
    assert re.sub(r"<[^>]+>", "", preview.text).split() == (
        ["100", "items", "match;", "the", "queue", "takes", "the", "first", "30."]
    )
    for query, size, said in (
        ("q=nothing-is-called-this", "10", "No item matches"),
        ("score_detector=no-such-detector&score_min=0.5", "10", "Cannot preview"),
        ("", "0", "Cannot preview"),
        ("", "ten", "Cannot preview"),
    ):
        got = client.get(
            "/benchmarks/mmlu/queues/preview",
            params={"source": "filter", "query": query, "size": size},
        )
        assert got.status_code == 200 and said in got.text, (query, size)
    # The queue holds the first 30, in the table's order.
    made = _queue_id(_create(client, csrf, name="thirty", size="30"))
    with mmlu() as s:
        held = list(
            s.scalars(
                select(QueueItem.instance_id)
                .where(QueueItem.queue_id == made)
                .order_by(QueueItem.position)
            )
        )
    assert held == by_id[:30]
    for size in ("0", str(MAX_SIZE + 1)):
        assert _create(client, csrf, name=f"size {size}", size=size).status_code == 422


def test_the_adjudication_view_shows_the_models_answers_and_the_rankers_scores(
    reviewer: tuple[TestClient, str], mmlu: sessionmaker[Session]
) -> None:
    client, csrf = reviewer
    open_queue = _queue_id(_create(client, csrf, name="open"))
    blind_queue = _queue_id(_create(client, csrf, name="blind", blind="true"))
    page = client.get(f"/queues/{open_queue}/next")
    iid = int(str(page.url).rsplit("/", 1)[1])
    with mmlu() as s:
        chose = dict(
            s.execute(
                select(Detector.name, Prediction.answer)
                .join(Prediction, Prediction.detector_id == Detector.id)
                .where(Prediction.instance_id == iid)
            ).all()
        )
        ranked = dict(
            s.execute(
                select(Detector.name, Score.score)
                .join(Score, Score.detector_id == Detector.id)
                .where(Score.instance_id == iid, Detector.kind == "ranker")
            ).all()
        )
    assert len(chose) >= 10 and ranked
    section = page.text[page.text.index('id="evidence"') :]
    section = section[: section.index("</section>")]
    # Per option, the models that chose it (every model once).
    for letter in "ABCD":
        row = re.search(rf'<tr class="option[^"]*" data-letter="{letter}">(.*?)</tr>', section)
        assert row is not None, letter
        cell = re.search(r'<td class="models small">(.*?)</td>', row.group(1))
        assert cell is not None
        named = [] if cell.group(1) == "—" else cell.group(1).split(", ")
        assert sorted(named) == sorted(m for m, a in chose.items() if a == letter), letter
    assert section.count('class="option is-label"') == 1
    # Each ranker's score of this item.
    for name, score in ranked.items():
        cells = rf'data-ranker="{re.escape(name)}"><td>[^<]*</td><td class="num"><span '
        row = re.search(cells + r'class="score" title="([^"]+)"', section)
        assert row is not None, name
        assert float(row.group(1)) == score, name
    # Detector outputs stay hidden in a blind queue until the reviewer reveals the item.
    blind = client.get(f"/queues/{blind_queue}/items/{iid}")
    assert blind.status_code == 200 and 'id="evidence"' not in blind.text
    revealed = client.post(
        f"/queues/{blind_queue}/items/{iid}/reveal",
        data={"csrf_token": csrf},
        follow_redirects=True,
    )
    assert 'id="evidence"' in revealed.text
