"""The judges' bias panel against a direct count of the raw judgment files, figure by figure.

Three real sources: the JudgeBench o1-mini judge (both orders, in ``data/``), and the MT-Bench
pair judgments and Arena-Hard-Auto judgments of ``../shared/data/formats`` (when present). Each
figure's value is counted here from the raw verdicts (the identity rules of each format, written
out again below); its interval is compared with a group bootstrap written here in plain numpy
(its own generator, so the two agree within Monte-Carlo error, not to the digit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select, text
from typer.testing import CliRunner

from app.cli import cli
from app.db import make_engine, session_factory, transaction
from app.ingest.arena_hard import import_arena_hard
from app.ingest.judgebench import import_judgebench
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.services.metrics.bias_panel import judge_panel
from app.settings import Settings
from app.tables import Base, Instance
from tests.conftest import truncate_pg
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, SHARED_FORMATS, read_jsonl
from tests.stats.test_bradley_terry import _reference as bradley_terry_reference

RESAMPLES = 2000
MT_BENCH = SHARED_FORMATS / "mt_bench"
ARENA_HARD = SHARED_FORMATS / "arena_hard"

# Raw verdicts as identities, per format (as each importer's SOURCE notes state them).
JB_AB = {"A>B": "A", "B>A": "B", "A=B": "tie"}
JB_BA = {"A>B": "B", "B>A": "A", "A=B": "tie"}  # the BA game names the swapped slots
MT = {"model_1": "A", "model_2": "B", "tie": "tie"}
AH_AB = {"A>>B": "A", "A>B": "A", "A=B": "tie", "B>A": "B", "B>>A": "B"}
AH_BA = {"A>>B": "B", "A>B": "B", "A=B": "tie", "B>A": "A", "B>>A": "A"}


@dataclass
class Pair:
    """One retained pair counted from a raw file."""

    group: str
    ab: str
    ba: str
    len_a: int
    len_b: int


def _jb_pairs() -> dict[str, dict[str, Pair]]:
    out: dict[str, Pair] = {}
    for r in read_jsonl(O1_MINI):
        first, second = (j["decision"] for j in r["judgments"])
        if first not in JB_AB or second not in JB_BA:
            continue  # an unparsed verdict: the pair is not retained
        group = (
            str(r["original_id"])
            if r["original_id"] is not None
            else "q" + hashlib.sha256(r["question"].encode()).hexdigest()
        )
        out[r["pair_id"]] = Pair(
            group, JB_AB[first], JB_BA[second], len(r["response_A"]), len(r["response_B"])
        )
    return {O1_MINI_JUDGE: out}


def _mt_pairs() -> dict[str, dict[str, Pair]]:
    out: dict[str, dict[str, Pair]] = {}
    for path in sorted(MT_BENCH.rglob("*_pair.jsonl")):
        for r in read_jsonl(path):
            if r["g1_winner"] not in MT or r["g2_winner"] not in MT:
                continue
            ext = f"{r['question_id']}:{r['model_1']}|{r['model_2']}"
            ext += "" if r["turn"] == 1 else f":turn{r['turn']}"
            judge = "fastchat_pair/" + r["judge"][0].replace("/", "_")
            out.setdefault(judge, {})[ext] = Pair(
                str(r["question_id"]), MT[r["g1_winner"]], MT[r["g2_winner"]], -1, -1
            )
    return out


def _ah_pairs() -> dict[str, dict[str, Pair]]:
    out: dict[str, dict[str, Pair]] = {}
    for path in sorted(ARENA_HARD.rglob("*.jsonl")):
        for r in read_jsonl(path):
            first, second = (g["score"] for g in r["games"])
            if first not in AH_AB or second not in AH_BA:
                continue
            ext = f"{r['question_id']}:gpt-4-0314|{r['model']}"
            out.setdefault(f"arena_hard/{r['judge']}", {})[ext] = Pair(
                str(r["question_id"]), AH_AB[first], AH_BA[second], -1, -1
            )
    return out


# --- the figures, counted here -----------------------------------------------------------------


def _decided(p: Pair) -> int:
    return (p.ab != "tie") + (p.ba != "tie")


def _longer(p: Pair) -> str | None:
    return None if p.len_a == p.len_b else ("A" if p.len_a > p.len_b else "B")


def _count(name: str, p: Pair) -> tuple[int, int]:
    """(hits, out of) of one pair for figure ``name``, from its definition."""
    if name == "first_slot_preference":
        return (p.ab == "A") + (p.ba == "B"), _decided(p)
    if name == "flip_rate":
        return int(p.ab != p.ba), 1
    if name.startswith("flip_rate_ab_"):
        c = name.removeprefix("flip_rate_ab_")
        return int(p.ab == c and p.ba != c), int(p.ab == c)
    if name == "tie_rate_ab":
        return int(p.ab == "tie"), 1
    if name == "tie_rate_ba":
        return int(p.ba == "tie"), 1
    if name == "consistency":
        return int(p.ab == p.ba), 1
    assert name == "length_association"
    longer = _longer(p)
    if longer is None:
        return 0, 0
    return (p.ab == longer) + (p.ba == longer), _decided(p)


FIGURES = [
    "first_slot_preference",
    "flip_rate",
    "flip_rate_ab_A",
    "flip_rate_ab_B",
    "flip_rate_ab_tie",
    "tie_rate_ab",
    "tie_rate_ba",
    "consistency",
    "length_association",
]


def reference_bootstrap(
    num: np.ndarray, den: np.ndarray, groups: list[str], resamples: int, seed: int
) -> tuple[float, float, float]:
    """Percentile interval and replicate SD of sum(num)/sum(den), resampling whole groups."""
    keys = sorted(set(groups))
    index = {g: k for k, g in enumerate(keys)}
    codes = np.array([index[g] for g in groups])
    num_g = np.bincount(codes, weights=num, minlength=len(keys))
    den_g = np.bincount(codes, weights=den, minlength=len(keys))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        w = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys))
        d = w @ den_g
        if d > 0:
            values.append((w @ num_g) / d)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high), float(np.std(values))


# --- the panels, computed once per dialect ----------------------------------------------------


def _empty(settings: Settings) -> None:
    engine = make_engine(settings)
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    if engine.dialect.name == "postgresql":
        truncate_pg(engine, tables)
    else:
        with engine.begin() as conn:
            for name in tables:
                conn.execute(text(f"DELETE FROM {name}"))
    engine.dispose()


SOURCES: dict[str, Any] = {"judgebench": _jb_pairs}
if MT_BENCH.is_dir() and ARENA_HARD.is_dir():
    SOURCES |= {"mt-bench": _mt_pairs, "arena-hard": _ah_pairs}


@pytest.fixture(scope="module")
def panels(_migrated: Settings) -> Iterator[dict[str, tuple[dict[str, Any], dict]]]:
    """Per source: the panel of every judge, and the raw pairs it is checked against."""
    engine = make_engine(_migrated)
    factory = session_factory(engine)
    try:
        with transaction(factory) as s:
            import_judgebench(s, [], outputs=[O1_MINI], benchmark="judgebench")
            if "mt-bench" in SOURCES:
                import_mtbench_judgments(s, sorted(MT_BENCH.rglob("*_pair.jsonl")))
                import_arena_hard(s, [ARENA_HARD])
        out = {}
        with factory() as s:
            for bench, read in SOURCES.items():
                raw = read()
                # The lengths of the read-back texts of MT-Bench and Arena-Hard are the stored
                # payload's (the importers' tests check those texts against the files).
                q = select(Instance.external_id, Instance.payload).where(
                    Instance.external_id.in_([e for pairs in raw.values() for e in pairs])
                )
                for ext, payload in s.execute(q):
                    for pairs in raw.values():
                        if ext in pairs and pairs[ext].len_a < 0:
                            pairs[ext].len_a = len(payload["response_a"])
                            pairs[ext].len_b = len(payload["response_b"])
                out[bench] = (judge_panel(s, bench, resamples=RESAMPLES, seed=0), raw)
        yield out
    finally:
        engine.dispose()
        _empty(_migrated)


CASES = [pytest.param(b, f, id=f"{b}-{f}") for b in SOURCES for f in FIGURES]


@pytest.mark.parametrize(("bench", "figure"), CASES)
def test_figure_equals_a_direct_count_and_an_independent_bootstrap(
    panels: dict[str, tuple[dict[str, Any], dict]], bench: str, figure: str
) -> None:
    panel, raw = panels[bench]
    rows = {r["judge"]: r for r in panel["judges"]}
    assert set(rows) == set(raw)
    checked = 0
    for judge, pairs in raw.items():
        row = rows[judge]
        assert row["retained"] == len(pairs)
        counts = np.array([_count(figure, p) for p in pairs.values()], dtype=float)
        num, den = counts[:, 0], counts[:, 1]
        if den.sum() == 0:
            assert row[figure] is None and row[f"{figure}_ci"] is None
            continue
        assert row[figure] == pytest.approx(num.sum() / den.sum(), abs=1e-12)
        groups = [p.group for p in pairs.values()]
        low, high, sd = reference_bootstrap(num, den, groups, RESAMPLES, seed=12345)
        ci = row[f"{figure}_ci"]
        # About four Monte-Carlo standard errors of a 2.5% quantile of 2,000 resamples (0.06
        # bootstrap SDs each, two independent runs), plus the rounding of discrete rates.
        tol = 0.35 * sd + 1e-9
        assert ci[0] == pytest.approx(low, abs=tol), (judge, ci, low, high)
        assert ci[1] == pytest.approx(high, abs=tol), (judge, ci, low, high)
        checked += 1
    assert checked >= 1


def test_counts_and_retention_of_the_o1_mini_judge(
    panels: dict[str, tuple[dict[str, Any], dict]],
) -> None:
    panel, raw = panels["judgebench"]
    (row,) = panel["judges"]
    pairs = raw[O1_MINI_JUDGE]
    n_rows = len(read_jsonl(O1_MINI))
    assert (row["n"], row["retained"]) == (n_rows, len(pairs))
    assert row["ab_choices"] == {
        c: sum(p.ab == c for p in pairs.values()) for c in ("A", "B", "tie")
    }
    # One judge: the analysis set is its retained pairs, its folds are made and it is estimable.
    assert panel["analysis"]["n"] == len(pairs)
    assert sum(panel["analysis"]["folds"]["sizes"]) == len(pairs)
    assert panel["analysis"]["folds"]["refusals"] == {O1_MINI_JUDGE: None}


def test_the_cli_prints_the_panel_as_json(
    panels: dict[str, tuple[dict[str, Any], dict]],
    _migrated: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The module's store, which still holds the imports of the panels fixture.
    monkeypatch.setenv("APPELLATE_DATABASE_URL", _migrated.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(tmp_path))
    args = ["judges", "judgebench", "--judge", O1_MINI_JUDGE, "--resamples", "200", "--json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    panel = json.loads(r.output)
    (row,) = panel["judges"]
    pairs = panels["judgebench"][1][O1_MINI_JUDGE]
    flips = sum(p.ab != p.ba for p in pairs.values())
    assert row["flip_rate"] == pytest.approx(flips / len(pairs))
    assert all(f"{f}_ci" in row for f in FIGURES) and panel["resamples"] == 200
    # The savings curve rides along; with no flip probe fitted yet it says what to run.
    assert "no flip probe or baseline" in panel["savings"][O1_MINI_JUDGE]["error"]
    assert "appellate probe fit" in panel["savings"][O1_MINI_JUDGE]["error"]
    bad = CliRunner().invoke(cli, ["judges", "judgebench", "--judge", "nobody"])
    assert bad.exit_code != 0
    assert "'nobody' has not judged 'judgebench' in both orders" in bad.output


@pytest.mark.parametrize("bench", [b for b in SOURCES if b != "judgebench"])
def test_model_win_rates_equal_a_count_of_debiased_verdicts(
    panels: dict[str, tuple[dict[str, Any], dict]], bench: str
) -> None:
    # A pair's debiased verdict is the common choice of its two orders, else a tie; a tie is
    # half a win for each model. The response models are in the pair's id ("qid:a|b").
    panel, raw = panels[bench]
    rows = {r["judge"]: r for r in panel["judges"]}
    for judge, pairs in raw.items():
        wins: dict[str, float] = {}
        games: dict[str, int] = {}
        for ext, p in pairs.items():
            model_a, model_b = ext.split(":")[1].split("|")
            if model_a == model_b:
                continue  # the baseline judged against its own answer: no game
            verdict = p.ab if p.ab == p.ba else "tie"
            for model, won in ((model_a, "A"), (model_b, "B")):
                points = 1.0 if verdict == won else 0.5 if verdict == "tie" else 0.0
                wins[model] = wins.get(model, 0.0) + points
                games[model] = games.get(model, 0) + 1
        got = {m["model"]: m for m in rows[judge]["strengths"]["models"]}
        assert set(got) == set(games)
        for model, row in got.items():
            assert row["games"] == games[model]
            assert row["win_rate"] == pytest.approx(wins[model] / games[model], abs=1e-12)
        # The strengths maximise the Bradley-Terry likelihood of these very games (scipy).
        names = sorted(games)
        w = np.zeros((len(names), len(names)))
        for ext, p in pairs.items():
            model_a, model_b = (names.index(m) for m in ext.split(":")[1].split("|"))
            if model_a == model_b:
                continue
            verdict = p.ab if p.ab == p.ba else "tie"
            a_won = 1.0 if verdict == "A" else 0.5 if verdict == "tie" else 0.0
            w[model_a, model_b] += a_won
            w[model_b, model_a] += 1.0 - a_won
        want = dict(zip(names, bradley_terry_reference(w), strict=True))
        for model, row in got.items():
            assert row["strength"] == pytest.approx(want[model], abs=1e-5)
