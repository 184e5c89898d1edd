"""The judges page ranks the response models by each judge's debiased verdicts (issue 24 item 1)."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.arena_hard import import_arena_hard
from app.services.metrics.judge_analysis import judge_verdicts
from app.settings import Settings
from tests.conftest import REPO
from tests.support.auth_support import api_client

EXCERPT = REPO / "tests" / "ingest" / "formats" / "arena_hard"


def test_the_judges_page_shows_each_models_win_rate_and_strength(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as s:
        import_arena_hard(s, [EXCERPT])
    with factory() as s:
        verdicts, facts = judge_verdicts(s, "arena-hard")
    with api_client(settings) as client:
        page = client.get("/benchmarks/arena-hard/judges", params={"resamples": "50"})
    assert page.status_code == 200, page.text[:300]
    checked = 0
    for v in verdicts:
        # Win rate of each model by hand: a game per pair of two different models, the
        # common choice of the two orders or a tie (half a win each).
        points: dict[str, list[float]] = {}
        for iid, (ab, ba) in v.choices.items():
            a, b = facts[iid].model_a, facts[iid].model_b
            if not a or not b or a == b:
                continue
            a_won = 1.0 if ab == ba == "A" else 0.0 if ab == ba == "B" else 0.5
            points.setdefault(a, []).append(a_won)
            points.setdefault(b, []).append(1.0 - a_won)
        if len(points) < 2:
            continue
        table = re.search(
            rf'<table class="grid model-strengths" data-judge="{re.escape(v.judge)}">.*?</table>',
            page.text,
            re.S,
        )
        assert table is not None, v.judge
        for model, won in points.items():
            row = re.search(rf'<tr data-model="{re.escape(model)}">(.*?)</tr>', table.group(0))
            assert row is not None, model
            cells = re.findall(r'<td class="num">([^<]*)', row.group(1))
            assert cells[0] == str(len(won))
            assert cells[1] == f"{sum(won) / len(won):.3f}"
            checked += 1
    assert checked >= 2
