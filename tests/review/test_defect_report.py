"""The defect report (service and page) and the export downloads, on both dialects."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sklearn.metrics import roc_auc_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import NotFound
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import changelog
from app.services.review.defect_report import defect_report
from app.settings import Settings
from app.stats.bootstrap import group_bootstrap, percentile_interval
from app.tables import Benchmark, Detector, Instance, LabelEvent, Score
from tests.support.auth_support import api_client
from tests.support.factories import (
    PAIRS,
    PAIRWISE,
    RESPONSES,
    RM_1,
    STATEMENTS,
    bump_version,
    seed_benchmarks,
)

REF = "reference"
TOPIC = "topic"
SCRIPT_REASON = "<script>alert('r')</script> the key is wrong"
ODD_TAG = "<i>odd</i>"
R = 100  # bootstrap resamples: enough for an interval, quick in a test
# Originals of the seed's pairwise reference labels (pair-004 was corrected to B on import).
ORIGINAL = {"pair/001:a|b": "A", "pair/002": "B", "pair-003-xss": "A", "pair-004": "B"}
ORIGINAL |= {"pair-005": "B", "q?x#y%z": "A"}


def _event(
    session: Session,
    external_id: str,
    value: str | None,
    *,
    source: str,
    author: str,
    reason: str = "",
    tags: tuple[str, ...] = (),
    label: str = REF,
    bench: str = PAIRWISE,
) -> None:
    iid = session.scalars(
        select(Instance.id)
        .join(Benchmark, Benchmark.id == Instance.benchmark_id)
        .where(Benchmark.name == bench, Instance.external_id == external_id)
    ).one()
    # A row, as queues.record writes it, without a queue around it.
    session.add(
        LabelEvent(
            instance_id=iid,
            label_name=label,
            value=value,
            source=source,
            author=author,
            reason=reason,
            tags=list(tags),
        )
    )
    session.flush()


@pytest.fixture
def reviewed(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """The seeded benchmarks with review on them.

    Pairwise ``reference``: two agreeing votes turn pair/002 from B to A; an adjudication
    turns pair-004 from B to A; split votes leave pair-003-xss as it was; a vote on pair-005
    is withdrawn. A three-valued ``topic`` set on the pairwise benchmark and the unscored
    response benchmark get one adjudication each.
    """
    seed_benchmarks(factory)
    with transaction(factory) as s:
        _event(
            s,
            "pair/002",
            "A",
            source="vote",
            author="alice",
            reason="B is wrong",
            tags=("wrong reference",),
        )
        _event(
            s,
            "pair/002",
            "A",
            source="vote",
            author="bob",
            reason="agree",
            tags=("wrong reference", "ambiguous"),
        )
        _event(
            s,
            "pair-004",
            "A",
            source="adjudication",
            author="carol",
            reason=SCRIPT_REASON,
            tags=("both wrong", ODD_TAG),
        )
        _event(s, "pair-003-xss", "B", source="vote", author="alice", tags=("ambiguous",))
        _event(s, "pair-003-xss", "A", source="vote", author="bob")
        _event(s, "pair-005", "A", source="vote", author="alice", tags=("duplicate",))
        _event(s, "pair-005", None, source="vote", author="alice", reason="undo")
        for pair, topic in zip(PAIRS, ["law", "math", "code"] * 2, strict=True):
            iid = s.scalars(select(Instance.id).where(Instance.external_id == pair.external_id))
            append_label(s, iid.one(), TOPIC, topic, source="import")
        _event(s, "pair/002", "code", source="adjudication", author="carol", label=TOPIC)
        _event(
            s,
            "default/001",
            "0",
            source="adjudication",
            author="carol",
            label="truth",
            bench=RESPONSES,
        )
    for name in (PAIRWISE, RESPONSES):
        bump_version(factory, name)
    return factory


def _report(factory: sessionmaker[Session], name: str = PAIRWISE, **kwargs: Any) -> dict:
    with transaction(factory) as s:
        return defect_report(s, name, resamples=R, **kwargs)


def test_tag_counts_and_label_set_counts(reviewed: sessionmaker[Session]) -> None:
    report = _report(reviewed, label=REF)
    tags = {t["tag"]: (t["changed"], t["standing"]) for t in report["tags"]}
    # Changed items' deciding events: both pair/002 votes and the pair-004 adjudication.
    # Standing: those plus alice's split vote on pair-003; the withdrawn vote counts nowhere.
    assert tags["wrong reference"] == (2, 2)
    assert tags["ambiguous"] == (1, 2)
    assert tags["both wrong"] == (1, 1)
    assert tags["duplicate"] == (0, 0)
    assert tags[ODD_TAG] == (1, 1)
    # The queue vocabulary first, in its order, then tags outside it.
    assert [t["tag"] for t in report["tags"]][-1] == ODD_TAG
    assert report["label_sets"] == [
        {
            "label": REF,
            "instances": 6,
            "reviewed": 3,
            "changed": 2,
            "by_adjudication": 1,
            "by_votes": 1,
        }
    ]


def test_changed_items_are_the_changelog(reviewed: sessionmaker[Session]) -> None:
    report = _report(reviewed)
    with transaction(reviewed) as s:
        bench_id = s.scalars(select(Benchmark.id).where(Benchmark.name == PAIRWISE)).one()
        expected = changelog(s, bench_id, k=2)
    got = report["changes"]
    assert [(c["label"], c["external_id"]) for c in got] == [
        (REF, "pair-004"),
        (REF, "pair/002"),
        (TOPIC, "pair/002"),
    ]
    for row, change in zip(got, expected, strict=True):
        assert row["external_id"] == change.external_id
        assert (row["original"], row["resolved"], row["rule"]) == (
            change.original,
            change.resolved,
            change.rule,
        )
        assert row["authors"] == list(change.authors)
        assert row["reasons"] == list(change.reasons)
        assert row["tags"] == list(change.tags)
    votes = got[1]
    assert (votes["original"], votes["resolved"], votes["rule"]) == ("B", "A", "unanimous-votes")
    assert votes["authors"] == ["alice", "bob"]
    assert votes["reasons"] == ["B is wrong", "agree"]
    assert votes["tags"] == ["ambiguous", "wrong reference"]
    assert got[0]["reasons"] == [SCRIPT_REASON]


def test_k_decides_what_changed(reviewed: sessionmaker[Session]) -> None:
    # Three agreeing votes needed: pair/002's two no longer override; the adjudication does.
    report = _report(reviewed, label=REF, k=3)
    assert [c["external_id"] for c in report["changes"]] == ["pair-004"]
    assert {t["tag"]: t["changed"] for t in report["tags"]}["wrong reference"] == 0


def _scores(factory: sessionmaker[Session], detector: str) -> dict[str, float]:
    with transaction(factory) as s:
        rows = s.execute(
            select(Instance.external_id, Score.score)
            .join(Score, Score.instance_id == Instance.id)
            .join(Detector, Detector.id == Score.detector_id)
            .join(Benchmark, Benchmark.id == Instance.benchmark_id)
            .where(Benchmark.name == PAIRWISE, Detector.name == detector)
        )
        return {ext: float(score) for ext, score in rows}


def test_metrics_original_against_resolved(reviewed: sessionmaker[Session]) -> None:
    report = _report(reviewed, label=REF)
    (entry,) = report["metrics"]
    assert entry["note"] is None
    cmp = entry["comparison"]
    assert (cmp["positive"], cmp["negative"], cmp["changed"]) == ("A", "B", 2)
    det = {d["detector"]: d for d in cmp["detectors"]}[RM_1]
    assert det["changed"] == 2  # RM_1 scored both changed items
    auroc = {m["metric"]: m for m in det["metrics"]}["auroc"]
    # Independently: scikit-learn on the scores against each side's labels (A is positive).
    scores = _scores(reviewed, RM_1)
    resolved = ORIGINAL | {"pair/002": "A", "pair-004": "A"}
    ids = sorted(scores)
    for side, labels in (("original", ORIGINAL), ("resolved", resolved)):
        y = [labels[i] == "A" for i in ids]
        assert auroc[side] == pytest.approx(roc_auc_score(y, [scores[i] for i in ids]))
        low, high = auroc[f"{side}_ci"]
        assert low <= auroc[side] <= high
    assert auroc["original"] != auroc["resolved"]
    assert auroc["difference"] == pytest.approx(auroc["resolved"] - auroc["original"])
    # The difference's interval is paired: review only relabelled, so both sides are the
    # matrix's group bootstraps (same items, groups and seed), subtracted resample by resample.
    groups = _groups(reviewed)
    y = {
        side: [labels[i] == "A" for i in ids]
        for side, labels in (("original", ORIGINAL), ("resolved", resolved))
    }
    p = [scores[i] for i in ids]
    g = [groups[i] for i in ids]
    sides = {
        side: group_bootstrap(y[side], p, g, metrics=["auroc"], resamples=R, seed=0) for side in y
    }
    deltas = sides["resolved"].replicates["auroc"][0] - sides["original"].replicates["auroc"][0]
    low, high, _ = percentile_interval(deltas)
    assert auroc["difference_ci"] == [low, high]
    assert low <= auroc["difference"] <= high
    for side in y:
        assert auroc[f"{side}_ci"] == sides[side].estimate("auroc").ci


def _groups(factory: sessionmaker[Session]) -> dict[str, str]:
    with transaction(factory) as s:
        rows = s.execute(
            select(Instance.external_id, Instance.group_key)
            .join(Benchmark, Benchmark.id == Instance.benchmark_id)
            .where(Benchmark.name == PAIRWISE)
        )
        return {ext: group for ext, group in rows}


def test_metrics_skipped_with_a_note(reviewed: sessionmaker[Session]) -> None:
    notes = {m["label"]: m["note"] for m in _report(reviewed)["metrics"]}
    assert notes[REF] is None
    assert notes[TOPIC].startswith("not compared: label set 'topic' has values")
    # Flip labels were not reviewed: nothing to compare.
    assert all("changed no label" in n for label, n in notes.items() if label.startswith("flip"))
    (unscored,) = _report(reviewed, RESPONSES)["metrics"]
    assert unscored["note"] == "no detector has scores on this benchmark"


def test_unknown_benchmark_or_label(reviewed: sessionmaker[Session]) -> None:
    with pytest.raises(NotFound):
        _report(reviewed, "nope")
    with pytest.raises(NotFound, match="no label set"):
        _report(reviewed, label="nope")
    assert _report(reviewed, STATEMENTS)["changes"] == []


# ---------------------------------------------------------------------------------------------
# Web


@pytest.fixture
def client(settings: Settings, reviewed: sessionmaker[Session]) -> Iterator[TestClient]:
    with api_client(settings, role="reviewer") as c:
        yield c


def test_report_page(client: TestClient) -> None:
    page = client.get(f"/benchmarks/{PAIRWISE}/report", params={"resamples": R})
    assert page.status_code == 200, page.text
    text = page.text
    # Reasons and tags are shown, escaped: the script never reaches the page as markup.
    assert "&lt;script&gt;alert(&#39;r&#39;)&lt;/script&gt; the key is wrong" in text
    assert "<script>alert" not in text
    assert "&lt;i&gt;odd&lt;/i&gt;" in text and "<i>odd" not in text
    # Changed items link to their instance page (the slash of the id encoded).
    assert f'href="/benchmarks/{PAIRWISE}/instances/pair%2F002"' in text
    assert f'data-detector="{RM_1}" data-metric="auroc"' in text
    assert f'action="/benchmarks/{PAIRWISE}/export"' in text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_benchmark_page_links_the_report(client: TestClient) -> None:
    page = client.get(f"/benchmarks/{PAIRWISE}")
    assert f'href="/benchmarks/{PAIRWISE}/report"' in page.text


def _parse(body: bytes, fmt: str) -> pd.DataFrame:
    if fmt == "jsonl":
        return pd.DataFrame([json.loads(line) for line in body.decode().splitlines()])
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(body), dtype=str, keep_default_na=False)
    return pq.read_table(io.BytesIO(body)).to_pandas()


@pytest.fixture
def export_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the export route makes its temporary directories in these tests."""
    where = tmp_path / "exports"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_export_download(client: TestClient, export_tmp: Path, fmt: str) -> None:
    res = client.get(f"/benchmarks/{PAIRWISE}/export", params={"format": fmt})
    assert res.status_code == 200, res.text
    assert res.headers["content-disposition"] == f'attachment; filename="{PAIRWISE}-resolved.{fmt}"'
    rows = _parse(res.content, fmt).set_index("external_id")
    assert sorted(rows.index) == sorted(ORIGINAL)
    assert rows.loc["pair/002", f"label:{REF}"] == "A"
    assert rows.loc["pair/002", f"original:{REF}"] == "B"
    assert rows.loc["pair-003-xss", f"label:{REF}"] == "A"
    assert dict(rows[f"original:{REF}"]) == ORIGINAL
    # The temporary directory is gone once the response is sent.
    assert list(export_tmp.iterdir()) == []


def test_export_original_labels(client: TestClient) -> None:
    res = client.get(
        f"/benchmarks/{PAIRWISE}/export", params={"format": "csv", "labels": "original"}
    )
    assert 'filename="jb-mini-original.csv"' in res.headers["content-disposition"]
    rows = _parse(res.content, "csv").set_index("external_id")
    assert dict(rows[f"label:{REF}"]) == ORIGINAL
    assert f"original:{REF}" not in rows.columns


def test_changelog_download_is_the_changelog(
    client: TestClient, reviewed: sessionmaker[Session], export_tmp: Path
) -> None:
    res = client.get(f"/benchmarks/{PAIRWISE}/export/changelog.csv")
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("text/csv")
    assert 'filename="jb-mini-resolved.changelog.csv"' in res.headers["content-disposition"]
    got = list(csv.DictReader(io.StringIO(res.text)))
    with transaction(reviewed) as s:
        bench_id = s.scalars(select(Benchmark.id).where(Benchmark.name == PAIRWISE)).one()
        expected = changelog(s, bench_id, k=2)

    def key(row: dict[str, Any]) -> tuple[str, str]:
        return row["label"], row["external_id"]

    for row, change in zip(sorted(got, key=key), expected, strict=True):
        assert (row["external_id"], row["label"], row["rule"]) == (
            change.external_id,
            change.label,
            change.rule,
        )
        assert (row["original"], row["resolved"]) == (change.original, change.resolved)
        assert json.loads(row["authors"]) == list(change.authors)
        assert json.loads(row["reasons"]) == list(change.reasons)
        assert json.loads(row["tags"]) == list(change.tags)
    assert list(export_tmp.iterdir()) == []


def test_filter_restricts_rows_and_changelog(client: TestClient) -> None:
    flt = "slice=source%3Dmmlu-pro-law"
    res = client.get(f"/benchmarks/{PAIRWISE}/export", params={"format": "csv", "filter": flt})
    assert res.status_code == 200, res.text
    rows = _parse(res.content, "csv")
    assert sorted(rows["external_id"]) == ["pair-004", "pair/001:a|b", "q?x#y%z"]
    # A URL pasted from the instance table works too, and the changelog follows the filter.
    url = f"http://testserver/benchmarks/{PAIRWISE}?{flt}&page=2"
    log = client.get(f"/benchmarks/{PAIRWISE}/export/changelog.csv", params={"filter": url})
    assert [r["external_id"] for r in csv.DictReader(io.StringIO(log.text))] == ["pair-004"]


def test_annotators_are_refused(settings: Settings, reviewed: sessionmaker[Session]) -> None:
    with api_client(settings, role="annotator") as c:
        for path in ("report", "export", "export/changelog.csv"):
            res = c.get(f"/benchmarks/{PAIRWISE}/{path}")
            assert res.status_code == 403, path


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"format": "xml"}, "format"),
        ({"labels": "best"}, "labels"),
        ({"k": "0"}, "k"),
        ({"filter": "bogus=1"}, "filter"),
        ({"filter": "label=nope%3DA"}, "nope"),
    ],
)
def test_bad_export_parameters(client: TestClient, params: dict[str, str], field: str) -> None:
    for path in ("export", "export/changelog.csv"):
        res = client.get(f"/benchmarks/{PAIRWISE}/{path}", params=params)
        assert res.status_code == 422, (path, params)
        assert field in res.text


def test_unknown_benchmark_pages(client: TestClient) -> None:
    assert client.get("/benchmarks/nope/report").status_code == 404
    assert client.get("/benchmarks/nope/export").status_code == 404
