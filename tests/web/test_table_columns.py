"""The instance table's columns and order in its URL, on both dialects (issue 21 item 8).

``cols`` names the shown columns; the server renders the others hidden, keeps ``cols`` in
every link back to the table (paging, sorting, the sort chip, the filter form, the instance
pages' way back) and shows the column sorted by whatever the choice. The order reads as words
in a chip whose link removes it. The browser side (the chooser writing ``cols``) is in
``tests/browser/test_tables.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings
from tests.support import factories as f
from tests.support.auth_support import api_client

HX = {"HX-Request": "true"}
PAGE = f"/benchmarks/{f.PAIRWISE}"


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with api_client(settings.model_copy(update={"page_size": 2})) as c:
        yield c


def head_cols(html: str) -> list[tuple[str, set[str]]]:
    """(data-col, classes) of each column heading, in order (a judge has three)."""
    row = html[html.index('<tr class="head-cols">') :]
    row = row[: row.index("</tr>")]
    out = []
    for attrs in re.findall(r"<th ([^>]*)>", row):
        col = re.search(r'data-col="([^"]*)"', attrs)
        cls = re.search(r'class="([^"]*)"', attrs)
        assert col is not None, attrs
        out.append((unescape(col.group(1)), set(cls.group(1).split()) if cls else set()))
    return out


def hidden_heads(html: str) -> set[str]:
    return {col for col, classes in head_cols(html) if "col-hidden" in classes}


def all_heads(html: str) -> set[str]:
    return {col for col, _ in head_cols(html)}


def checked_boxes(html: str) -> set[str]:
    chooser = html[html.index('class="column-chooser"') : html.index("columns-all")]
    return {
        unescape(m.group(1))
        for m in re.finditer(r'<input type="checkbox" value="([^"]*)" checked>', chooser)
    }


def cols_of(url: str) -> list[str]:
    return parse_qs(urlsplit(unescape(url)).query, keep_blank_values=True).get("cols", [])


def first_row_cells(html: str) -> list[str]:
    """The classes of the first body row's cells."""
    body = html[html.index("<tbody>") :]
    row = body[: body.index("</tr>")]
    return re.findall(r'<td class="([^"]*)"', row)


def test_cols_in_the_url_show_those_columns(client: TestClient) -> None:
    score = f"score:{f.RM_1}"
    r = client.get(f"{PAGE}?cols=text&cols={quote(score)}")
    assert r.status_code == 200
    assert hidden_heads(r.text) == {
        "group",
        "slice:source",
        "slice:response_model",
        "label:reference",
        f"judge:{f.JUDGE}",
        f"judge:{f.JUDGE_2}",
        f"score:{f.RM_2}",
    }
    assert checked_boxes(r.text) == {"text", score}
    # Body cells too, each hidden with its heading: only id, text and the score show.
    heads = head_cols(r.text)
    cells = first_row_cells(r.text)
    assert len(cells) == len(heads) == 14
    shown = {heads[i][0] for i, c in enumerate(cells) if "col-hidden" not in c.split()}
    assert shown == {"external_id", "text", score}
    # The filter form sends them along; paging and sorting links keep them (table order).
    fields = r'<input type="hidden" name="cols" form="filters" value="([^"]*)">'
    assert re.findall(fields, r.text) == ["text", score]
    nxt = re.search(r'<a href="([^"]+)"[^>]*rel="next"', r.text)
    assert nxt is not None and cols_of(nxt.group(1)) == ["text", score]
    sort_link = re.search(rf'data-col="{re.escape(score)}"[^>]*><a href="([^"]+)"', r.text)
    assert sort_link is not None and cols_of(sort_link.group(1)) == ["text", score]
    # A row's page keeps them for its way back to the table.
    row = re.search(r'<td class="id"><a href="([^"]+)"', r.text)
    assert row is not None and cols_of(row.group(1)) == ["text", score]
    instance = client.get(unescape(row.group(1)))
    back = re.search(r'<a href="([^"]+)">back to table</a>', instance.text)
    assert back is not None and cols_of(back.group(1)) == ["text", score]
    # htmx pushes the canonical URL with them, in table order.
    frag = client.get(f"{PAGE}?cols={quote(score)}&cols=text&page=2", headers=HX)
    assert frag.headers["HX-Push-Url"] == (f"{PAGE}?page=2&cols=text&cols={quote(score, safe='')}")


def test_no_cols_shows_every_column_and_a_blank_one_none(client: TestClient) -> None:
    every = client.get(PAGE)
    assert hidden_heads(every.text) == set()
    assert 'name="cols"' not in every.text
    none = client.get(f"{PAGE}?cols=", headers=HX)
    assert hidden_heads(none.text) == all_heads(none.text) - {"external_id"}
    assert checked_boxes(none.text) == set()
    assert none.headers["HX-Push-Url"] == f"{PAGE}?cols="


def test_the_sorted_column_shows_whatever_the_choice(client: TestClient) -> None:
    """Sorted by a judge's confidence with only the text chosen: the judge's columns show."""
    r = client.get(f"{PAGE}?sort=-confidence%3A{quote(f.JUDGE, safe='')}&cols=text&q=pair")
    assert r.status_code == 200
    assert f"judge:{f.JUDGE}" not in hidden_heads(r.text)
    assert f"judge:{f.JUDGE_2}" in hidden_heads(r.text)
    # The box stays as chosen (unchecked): the column hides again once the sort is gone.
    assert checked_boxes(r.text) == {"text"}
    assert "(sorted by: shown)" in r.text
    # The order reads as words; its link drops the sort only.
    chip = re.search(r'<span class="sort-chip">(.*?)</span>', r.text, re.S)
    assert chip is not None
    assert re.sub(r"<[^>]+>", "", chip.group(1)).split() == [
        "Sorted",
        "by",
        "confidence",
        "of",
        f"{f.JUDGE},",
        "descending",
        "✕",
    ]
    clear = re.search(r'<a class="sort-clear" href="([^"]+)"', chip.group(1))
    assert clear is not None
    assert unescape(clear.group(1)) == f"{PAGE}?q=pair&cols=text"
    unsorted = client.get(unescape(clear.group(1)))
    assert f"judge:{f.JUDGE}" in hidden_heads(unsorted.text)
    assert 'class="sort-chip"' not in unsorted.text
    # A score kept in view, ascending, and the group column (plain field names).
    score = client.get(f"{PAGE}?sort=score%3A{quote(f.RM_2, safe='')}&cols=")
    assert hidden_heads(score.text) == all_heads(score.text) - {
        "external_id",
        f"score:{f.RM_2}",
    }
    assert f"Sorted by score of {f.RM_2}, ascending" in score.text
    group = client.get(f"{PAGE}?sort=-group&cols=text")
    assert "group" not in hidden_heads(group.text)
    assert "Sorted by group, descending" in group.text


def test_the_raw_sort_parameter_is_not_shown(client: TestClient) -> None:
    r = client.get(f"{PAGE}?sort=-score%3A{quote(f.RM_1, safe='')}")
    text = re.sub(r"<[^>]+>", " ", r.text)
    assert f"-score:{f.RM_1}" not in text
    assert f"Sorted by score of {f.RM_1}, descending" in r.text
    # The instance page reached from it says the same.
    instance = client.get(f"{PAGE}/instances/pair-004?sort=-score%3A{quote(f.RM_1, safe='')}")
    assert f"sorted by score of {f.RM_1}, descending" in instance.text
    assert f"-score:{f.RM_1}" not in re.sub(r"<[^>]+>", " ", instance.text)
