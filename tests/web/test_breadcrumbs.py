"""Breadcrumbs: every page's trail comes from one macro, with a separator after each link."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings
from tests.support import factories as f
from tests.support.auth_support import api_client

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
NAV = re.compile(r'<nav class="crumbs">(.*?)</nav>', re.S)


def test_every_trail_is_the_macro() -> None:
    blocks = {
        path.name: m.group(1)
        for path in sorted(TEMPLATES.glob("*.html"))
        if (m := re.search(r"\{% block crumbs %\}(.*?)\{% endblock %\}", path.read_text(), re.S))
    }
    assert len(blocks) >= 15
    for name, block in blocks.items():
        if name == "base.html":
            continue
        assert "crumbs(" in block and "<a " not in block, name


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with api_client(settings, role="admin") as c:
        yield c


@pytest.mark.parametrize(
    "path",
    [
        "/",
        f"/benchmarks/{f.PAIRWISE}",
        f"/benchmarks/{f.PAIRWISE}/metrics?resamples=10",
        f"/benchmarks/{f.PAIRWISE}/disagreements",
        f"/benchmarks/{f.PAIRWISE}/report?resamples=10",
        "/jobs",
        "/queues",
        "/queues/new",
        "/account",
    ],
)
def test_each_link_of_a_trail_is_followed_by_a_separator(client: TestClient, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200, page.text
    nav = NAV.search(page.text)
    assert nav is not None
    trail = nav.group(1)
    links = trail.count("<a ")
    assert trail.count('<span class="sep" aria-hidden="true">/</span>') == links
    assert trail.rstrip().endswith("</span>")  # where you are, not a link
