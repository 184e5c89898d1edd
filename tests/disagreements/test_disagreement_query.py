"""The disagreement query parser and the mode registry: blanks, stale parameters, errors."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode

import pytest

from app.errors import InvalidInput
from app.services.disagreements.disagreement_query import (
    COMMON_PARAMS,
    DisagreementQuery,
    build_query,
    mode_param_names,
    parse_disagreement_query,
)
from app.services.disagreements.lists import MODES
from app.services.disagreements.modes import all_modes, get_mode, modes_declaring
from app.services.disagreements.modes.base import DisagreementMode, Param, ParamKind


def parse(query: str, *, strict: bool = False) -> DisagreementQuery:
    return parse_disagreement_query(parse_qs(query, keep_blank_values=True), strict=strict)


def test_registry_declares_every_mode() -> None:
    names = [m.name for m in all_modes()]
    assert names[:5] == ["threshold", "cleanlab", "consensus", "judge-orders", "detector-vs-judge"]
    assert tuple(names) == MODES and len(set(names)) == len(names)
    for mode in all_modes():
        assert isinstance(mode, DisagreementMode) and get_mode(mode.name) is mode
        assert mode.title and mode.help and mode.detectors.describe()
        for p in mode.params:
            assert p.help and p.title and p.name not in COMMON_PARAMS
    # A parameter declared by several modes has one kind everywhere (one form field, one schema).
    for name in mode_param_names():
        kinds = {m.param(name).kind for m in modes_declaring(name)}  # type: ignore[union-attr]
        assert len(kinds) == 1, name
    assert get_mode("consensus").detectors.many and not get_mode("threshold").detectors.many
    with pytest.raises(InvalidInput, match="unknown mode 'vote'"):
        get_mode("vote")


def test_empty_fields_are_unset() -> None:
    # What the page's form sends when the optional fields are left empty.
    q = parse("mode=consensus&detector=a&detector=&detector=b&min_confidence=&k=&label=&limit=")
    assert q == DisagreementQuery("consensus", ("a", "b"))
    assert q.values == {} and q.label is None and q.limit is None
    assert parse("") == DisagreementQuery()
    assert parse("detector=a&min_confidence=%20").values == {}


def test_parameters_of_other_modes_are_dropped() -> None:
    # A stale k (the form switched from consensus) or judge never makes threshold fail,
    # even when it would not parse.
    q = parse("mode=threshold&detector=a&k=2&judge=j&min_confidence=0.7")
    assert q.values == {"min_confidence": 0.7}
    assert parse("mode=threshold&detector=a&k=abc").values == {}
    assert parse("mode=consensus&detector=a&k=2&judge=j").values == {"k": 2}
    assert parse("mode=detector-vs-judge&detector=a&k=2&judge=j").values == {"judge": "j"}
    assert parse("mode=judge-orders&detector=j&min_confidence=0.9").values == {}
    assert parse("detector=a&q=zebra&page=3") == DisagreementQuery(detectors=("a",))


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("mode=bogus", "unknown mode 'bogus'"),
        ("min_confidence=abc", "min_confidence must be a number, got 'abc'"),
        ("min_confidence=2", r"min_confidence must lie in \[0, 1\], got 2.0"),
        ("min_confidence=nan", "min_confidence must lie in"),
        ("mode=consensus&k=1.5", "k must be a whole number, got '1.5'"),
        ("mode=consensus&k=0", "k must be >= 1, got 0"),
        ("limit=-1", "limit must be >= 0, got -1"),
        ("limit=x", "limit must be a whole number"),
    ],
)
def test_bad_values_name_the_parameter(query: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse(query)


def test_strict_refuses_what_the_mode_does_not_take() -> None:
    with pytest.raises(InvalidInput, match=r"^k applies to consensus mode only$"):
        parse("mode=threshold&k=2", strict=True)
    with pytest.raises(InvalidInput, match="judge applies to detector-vs-judge mode only"):
        parse("judge=j", strict=True)
    with pytest.raises(
        InvalidInput,
        match="min_confidence applies to threshold, cleanlab, consensus and detector-vs-judge",
    ):
        parse("mode=judge-orders&min_confidence=0.5", strict=True)
    with pytest.raises(InvalidInput, match="unknown parameter 'colour'"):
        parse("colour=red", strict=True)
    with pytest.raises(InvalidInput, match="k applies to consensus mode only"):
        build_query("threshold", ["a"], values={"k": 2})
    # None is unset, not "given", for the typed entry point.
    assert build_query("threshold", ["a"], values={"k": None, "judge": None}).values == {}


def test_settle_fills_defaults_and_checks_the_quorum() -> None:
    assert get_mode("threshold").settle(["a"], {}) == {"min_confidence": 0.8}
    assert get_mode("cleanlab").settle(["a"], {}) == {"min_confidence": None}
    consensus = get_mode("consensus")
    assert consensus.settle(["a", "b", "c"], {}) == {"min_confidence": 0.8, "k": 3}
    assert consensus.settle(["a", "b", "c"], {"k": 2})["k"] == 2
    with pytest.raises(InvalidInput, match=r"k must lie in \[1, 2\], got 3"):
        consensus.settle(["a", "b"], {"k": 3})
    with pytest.raises(InvalidInput, match="detector-vs-judge mode needs a judge"):
        get_mode("detector-vs-judge").settle(["a"], {})
    assert get_mode("detector-vs-judge").missing(["a"], {}) == ["a judge"]
    assert get_mode("threshold").missing([], {}) == ["a detector (one scored detector)"]


@pytest.mark.parametrize(
    "query",
    [
        "detector=a&mode=threshold&min_confidence=0.65&label=truth&limit=7",
        "detector=a&detector=b&mode=consensus&k=2&positive=1",
        "detector=a&mode=detector-vs-judge&judge=arena%2Fo1&min_confidence=0.9",
        "detector=j&mode=judge-orders",
    ],
)
def test_as_params_round_trips(query: str) -> None:
    q = parse(query)
    pairs = [
        (k, str(v))
        for k, vs in q.as_params().items()
        if vs is not None
        for v in (vs if isinstance(vs, list) else [vs])
    ]
    assert parse(urlencode(pairs)) == q
    assert q.as_params(default_limit=q.limit)["limit"] is None


def test_param_bounds_and_placeholders() -> None:
    p = Param("band", ParamKind.NUMBER, "Band", "h", default=0.1, low=0.0, high=0.5, low_open=True)
    assert p.parse(" 0.5 ") == 0.5 and p.placeholder == "0.1"
    for bad in ("0", "-0.1", "0.6", "inf"):
        with pytest.raises(InvalidInput, match=r"band must lie in \(0, 0.5\]"):
            p.parse(bad)
    with pytest.raises(InvalidInput, match="band must be number"):
        p.check(True)
    k = get_mode("consensus").param("k")
    assert k is not None and k.placeholder == "all" and k.python_type is int
