"""Every CSV the app writes is inert in a spreadsheet: no cell starts a formula.

Benchmark text is untrusted. A cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return is run as a formula by Excel, LibreOffice and Google Sheets (OWASP "CSV
injection"); such cells get a leading single quote, plain numbers (``-0.25``) excepted.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.export import register
from app.db import transaction
from app.ingest.export.benchmark import changelog_path
from app.ingest.export.csv_safe import neutralise
from app.main import create_app
from app.services.evidence.labels import append_label
from app.settings import Settings
from app.tables import Benchmark, Instance
from tests.conftest import REPO
from tests.support.auth_support import bearer
from tests.support.factories import JUDGE, PAIRWISE, seed_benchmarks

FORMULAS = ("=1+1", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", "\t=1", "\r=1")
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")


@pytest.mark.parametrize("cell", FORMULAS)
def test_formulas_get_a_leading_quote(cell: str) -> None:
    assert neutralise(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["", "A", "plain text", "0.5", "-0.25", "+3", "-1e-05", "'=x"])
def test_text_and_numbers_stay_as_they_are(cell: str) -> None:
    assert neutralise(cell) == cell


def _assert_inert(text: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) > 1, text
    for row in rows:
        for cell in row:
            if cell.startswith(DANGEROUS):
                float(cell)  # only a plain number may start with a sign
    return rows


@pytest.fixture
def hostile(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """The seeded benchmarks with every pair's id and a vote's reason made into formulas."""
    seed_benchmarks(factory)
    with transaction(factory) as s:
        bench_id = s.scalars(select(Benchmark.id).where(Benchmark.name == PAIRWISE)).one()
        ids = s.scalars(select(Instance.id).where(Instance.benchmark_id == bench_id)).all()
        for k, iid in enumerate(ids):
            formula = FORMULAS[k % len(FORMULAS)]
            s.execute(
                update(Instance).where(Instance.id == iid).values(external_id=f"{formula}#{k}")
            )
            append_label(
                s, iid, "reference", "B", source="adjudication", author="@evil", reason="=2*3"
            )
    return factory


@pytest.fixture
def client(settings: Settings, hostile: sessionmaker[Session]) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=bearer(settings)) as c:
        yield c


def test_disagreements_csv_is_inert(client: TestClient) -> None:
    params = {"detector": JUDGE, "mode": "judge-orders"}
    got = client.get(f"/benchmarks/{PAIRWISE}/disagreements.csv", params=params)
    assert got.status_code == 200, got.text
    rows = _assert_inert(got.text)
    ids = [r[1] for r in rows[1:]]
    assert ids and all(i.startswith("'") for i in ids)


@pytest.mark.parametrize("path", ["export", "export/changelog.csv"])
def test_web_exports_are_inert(client: TestClient, path: str) -> None:
    got = client.get(f"/benchmarks/{PAIRWISE}/{path}", params={"format": "csv", "k": "1"})
    assert got.status_code == 200, got.text
    rows = _assert_inert(got.text)
    header = rows[0]
    id_column = header.index("external_id")
    assert all(r[id_column].startswith("'") for r in rows[1:])


def test_cli_export_and_changelog_are_inert(
    settings: Settings,
    hostile: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    cli = typer.Typer()
    cli.callback()(lambda: None)
    register(cli)
    out = tmp_path / "release.csv"
    done = CliRunner().invoke(cli, ["export", PAIRWISE, str(out), "--labels", "resolved"])
    assert done.exit_code == 0, done.output
    for path in (out, changelog_path(out)):
        _assert_inert(path.read_text(encoding="utf-8"))


def test_every_csv_writer_goes_through_csv_safe() -> None:
    """A new CSV writer must use :func:`app.ingest.export.csv_safe.writer`, not csv's own."""
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for root in ("app", "workers")
        for path in sorted((REPO / root).rglob("*.py"))
        if path != REPO / "app" / "ingest" / "export" / "csv_safe.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"\bcsv\.(writer|DictWriter)\b", line)
    ]
    assert found == []
