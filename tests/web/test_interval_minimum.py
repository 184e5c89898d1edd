"""Issue 21 item 9: no interval from too few groups, on every page and in the API, both databases.

With every item in one group each resample is the data itself, and the agreement page showed
kappa 0.000 [0.000, 0.000]. Below ``Settings.min_interval_groups`` resampled groups the
estimate keeps its value, its bounds are null with a reason, and pages say "too few groups
for an interval" (``app.stats.bootstrap.too_few_groups``, the one place that decides).
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.evidence.benchmarks import bump_data_version
from app.settings import Settings
from app.stats import bootstrap
from app.tables import Benchmark
from tests.conftest import DATA
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.review.test_queue_agreement import build_queue
from tests.support.auth_support import api_client

TOO_FEW = "too few groups for an interval"


def test_the_setting_defaults_to_ten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPELLATE_MIN_INTERVAL_GROUPS", raising=False)
    assert Settings().min_interval_groups == 10


def test_an_estimate_from_too_few_groups_has_a_reason_not_bounds() -> None:
    bootstrap.set_min_interval_groups(10)
    y = [0, 1] * 10
    scores = [0.1, 0.9, 0.4, 0.6, 0.2, 0.7, 0.3, 0.8, 0.5, 0.55] * 2
    few = bootstrap.group_bootstrap(y, scores, [i % 3 for i in range(20)], resamples=50)
    est = few.estimate("auroc")
    assert est.value is not None and est.ci is None and est.valid == 0
    assert est.reason == f"{TOO_FEW} (3 < 10)"
    assert few.difference("auroc", 0, 0).estimate.reason == est.reason
    many = bootstrap.group_bootstrap(y, scores, list(range(20)), resamples=50)
    assert many.estimate("auroc").ci is not None and many.estimate("auroc").reason is None


def _agreement_section(page: str) -> str:
    start = page.index("<h2>Agreement")
    return page[start : page.index("</table>", page.index("</table>", start) + 1)]


# One group for all twelve items; or a group each (every statistic has 7 to 11 of them).
@pytest.mark.parametrize(("groups", "withheld"), [(1, True), (12, False)])
def test_queue_agreement_says_too_few_groups(
    settings: Settings, factory: sessionmaker[Session], groups: int, withheld: bool
) -> None:
    queue_id = build_queue(factory, lambda u: f"g{u % groups}")
    strict = settings.model_copy(update={"min_interval_groups": 10 if withheld else 5})
    with api_client(strict) as client:
        page = client.get(f"/queues/{queue_id}/agreement")  # the section the queue page links
    assert page.status_code == 200
    section = _agreement_section(page.text)
    intervals = re.findall(r'<span class="ci">\[[-0-9.]+, [-0-9.]+\]</span>', section)
    if withheld:
        # alpha, 6 annotator pairs and 4 annotators against the original: a reason each.
        assert section.count(f">{TOO_FEW}</span>") == 11 and intervals == []
        assert 'title="too few groups for an interval (1 &lt; 10)"' in section
    else:
        assert TOO_FEW not in section and len(intervals) == 11


def test_metrics_page_and_api_say_too_few_groups(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    params = {"resamples": "50"}
    # More groups than the benchmark has: every interval is withheld.
    strict = settings.model_copy(update={"min_interval_groups": 100_000})
    with api_client(strict) as client:
        page = client.get("/benchmarks/judgebench/metrics", params=params).text
        api = client.get("/api/benchmarks/judgebench/metrics", params=params).json()
    assert TOO_FEW in page and not re.search(r'<span class="ci">\[', page)
    row = api["rows"][0]
    assert row["auroc"] is not None and row["auroc_ci"] is None
    assert row["auroc_ci_reason"].startswith(TOO_FEW)
    # The default minimum: the benchmark's 350 groups give intervals. Results are kept per
    # data version (computed under the minimum of their time): a new version recomputes them.
    with transaction(factory) as session:
        bump_data_version(session, session.scalars(select(Benchmark)).one())
    with api_client(settings.model_copy(update={"min_interval_groups": 10})) as client:
        page = client.get("/benchmarks/judgebench/metrics", params=params).text
        api = client.get("/api/benchmarks/judgebench/metrics", params=params).json()
    assert TOO_FEW not in page and re.search(r'<span class="ci">\[', page)
    assert api["rows"][0]["auroc_ci"] is not None and api["rows"][0].get("auroc_ci_reason") is None


def test_paired_differences_say_too_few_groups(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # A choice benchmark's metrics page compares each model with the most accurate one on
    # shared resamples: those differences are withheld too, with the reason.
    with transaction(factory) as session:
        import_mmlu_redux(session, [DATA / "mmlu-redux" / "astronomy.csv"], "astro")
    strict = settings.model_copy(update={"min_interval_groups": 100_000})
    params = {"resamples": "30"}
    with api_client(strict) as client:
        page = client.get("/benchmarks/astro/metrics", params=params).text
        api = client.get("/api/benchmarks/astro/metrics", params=params).json()
    differences = [m for pair in api["comparisons"] for m in pair["metrics"]]
    assert differences and all(m["difference_ci"] is None for m in differences)
    assert all(m["difference_ci_reason"].startswith(TOO_FEW) for m in differences)
    table = page[page.index('<table class="grid comparisons">') :]
    table = table[: table.index("</table>")]
    assert TOO_FEW in table and '<span class="ci">[' not in table
