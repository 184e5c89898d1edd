"""Filter query strings: parsing, canonical serialisation and their round trip."""

from __future__ import annotations

import asyncio
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi import Depends, FastAPI, Query
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.services.table.instance_filter import (
    FlipState,
    InstanceFilter,
    LabelCondition,
    SliceCondition,
)
from app.tables import Choice
from app.web.filters import instance_filter, query_string
from app.web.urls import benchmark_url, instance_url

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
names = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="="), min_size=1, max_size=12
)
numbers = st.floats(allow_nan=False, allow_infinity=False, width=32) | st.integers(-1000, 1000)


def strip_blank(value: str) -> str:
    return value if value.strip() else ""


filters = st.builds(
    InstanceFilter,
    q=texts.map(strip_blank),
    labels=st.lists(
        st.builds(LabelCondition, name=names, value=st.none() | texts.filter(bool)), max_size=3
    ).map(tuple),
    slices=st.lists(st.builds(SliceCondition, field=names, value=texts), max_size=2).map(tuple),
    judge=st.none() | names.filter(lambda s: s.strip() != ""),
    ab=st.none() | st.sampled_from(Choice),
    ba=st.none() | st.sampled_from(Choice),
    flip=st.none() | st.sampled_from(FlipState),
    score_detector=st.none() | names.filter(lambda s: s.strip() != ""),
    score_min=st.none() | numbers.map(float),
    score_max=st.none() | numbers.map(float),
)


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/f")
    def echo(
        flt: Annotated[InstanceFilter, Depends(instance_filter)],
        page: Annotated[int, Query()] = 1,
    ) -> InstanceFilter:
        return flt

    return app


CLIENT = TestClient(_app())


@settings(max_examples=150, deadline=None)
@given(filters)
def test_query_string_round_trips(flt: InstanceFilter) -> None:
    r = CLIENT.get("/f" + query_string(flt))
    assert r.status_code == 200, r.text
    assert InstanceFilter.model_validate(r.json()) == flt


def test_blank_parameters_are_no_conditions() -> None:
    r = CLIENT.get("/f?q=&label=&slice=&judge=&ab=&ba=&flip=+&score_min=&score_max=")
    assert InstanceFilter.model_validate(r.json()) == InstanceFilter()


def test_label_splits_at_the_first_equals_sign() -> None:
    r = CLIENT.get("/f?label=verdict%3DA%3DB&label=flip%3Ajudge%2Fx%3D")
    labels = InstanceFilter.model_validate(r.json()).labels
    assert labels == (
        LabelCondition(name="verdict", value="A=B"),
        LabelCondition(name="flip:judge/x", value=None),
    )


@pytest.mark.parametrize("raw", ["reference", "=A"])
def test_label_without_name_or_equals_is_refused(raw: str) -> None:
    with pytest.raises(InvalidInput, match="expected NAME=VALUE") as info:
        asyncio.run(instance_filter(label=[raw]))
    assert info.value.field == "label"


def test_canonical_order_and_blanks() -> None:
    flt = InstanceFilter(
        q="x y",
        labels=(LabelCondition(name="reference", value="A"),),
        judge="arena_hard/o1-mini",
        flip=FlipState.yes,
        score_detector="rm/1",
        score_min=0.0,
        score_max=2.5,
    )
    assert query_string(flt, page=3) == (
        "?q=x+y&label=reference%3DA&judge=arena_hard%2Fo1-mini&flip=yes"
        "&score_detector=rm%2F1&score_min=0&score_max=2.5&page=3"
    )
    assert query_string(InstanceFilter(), page=1) == ""


def test_urls_encode_every_reserved_character() -> None:
    url = instance_url("jb", "a/b?c#d%e f|g:h", InstanceFilter(q="z"), page=2)
    parts = urlsplit(url)
    assert parts.path == "/benchmarks/jb/instances/a%2Fb%3Fc%23d%25e%20f%7Cg%3Ah"
    assert parse_qsl(parts.query) == [("q", "z"), ("page", "2")]
    assert benchmark_url("jb") == "/benchmarks/jb"
