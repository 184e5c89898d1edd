"""Selective re-judging on real judgments: SmolLM2 judges JudgeBench pairs, the savings curve.

Prints one JSON object. In a data directory of its own (``--data``, resumable: each step is a
job that continues where it stopped): the ``--pairs`` shortest JudgeBench pairs (GPT-4o
responses; the shortest, because a CPU judges them in minutes) are judged by SmolLM2 in both
orders (calibrated forced choice, AB activations captured), the flip probe and its baselines
are fitted by nested grouped CV (``appellate probe fit``), and ``judge_savings`` reports the
share of flips recovered against extra judge calls for the probe, the six-feature baseline and
the random order, with group-bootstrap intervals and the k that recovers 50% / 80% of flips.

With ``--second-mode forced`` (or ``generate``) SmolLM2 judges the same pairs a second time in
that mode: the two configurations' shared analysis set (pairs parsed in both orders by both),
their shared outer folds (each pair in one fold for both judges, no question split across folds),
and each one's estimability verdict on those folds (``appellate judges --json``, ``probe fit
--shared``) are reported under ``two_judges``.

With ``--rejudge N`` the next ``N`` shortest pairs are then judged in the AB order only, and the
``rejudge`` job re-judges the ``--budget`` of them that the frozen probe ranks first in BA.

    python benchmarks/judge_savings_bench.py --data /tmp/savings [--pairs 60] [--rejudge 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "data/judgebench/dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
JUDGE = "smollm2/calibrated"


def _appellate(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"appellate {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _printed_json(text: str) -> Any:
    """The JSON object a ``--wait`` command prints on stdout (its job number goes to stderr)."""
    return json.loads(text)


def _shortest(folder: Path, start: int, stop: int, name: str) -> Path:
    rows = [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: len(r["question"]) + len(r["response_A"]) + len(r["response_B"]))
    out = folder / name / SOURCE.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows[start:stop]), encoding="utf-8")
    return out


def _usage_error(stderr: str) -> str:
    """The message of a usage error: the lines inside the box the CLI draws around it."""
    boxed = [line.strip("│ ").strip() for line in stderr.splitlines() if line.startswith("│")]
    return " ".join(boxed) or stderr.strip()


def _two_judges(env: dict[str, str], mode: str, resamples: int) -> dict[str, Any]:
    """Judge the pairs again in ``mode``; the two judges' shared set, folds and gate verdicts."""
    second = f"smollm2/{mode}"
    judged = _printed_json(
        _appellate(env, "judge", "jb-savings", "--model", "smollm2", "--mode", mode, "--wait")
    )
    panel = json.loads(
        _appellate(
            env, "judges", "jb-savings", "--judge", JUDGE, "--judge", second, "--json",
            "--resamples", str(resamples),
        )
    )  # fmt: skip
    out: dict[str, Any] = {"second": second, "judge_result": judged["result"]}
    out["panel"] = {k: v for k, v in panel.items() if k != "savings"}
    for judge, other in ((JUDGE, second), (second, JUDGE)):
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "probe", "fit", "jb-savings", "--judge", judge,
             "--shared", other, "--wait"],
            env=env, cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        out[f"fit {judge}"] = (
            _printed_json(done.stdout)["result"]
            if done.returncode == 0
            else {"refused": _usage_error(done.stderr)}
        )
    return out


def main() -> None:
    """Run the steps (each resumable) and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--rejudge", type=int, default=0)
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--second-mode", default=None, help="forced or generate: a second judge")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "APPELLATE_DATA_DIR": str(args.data),
        "APPELLATE_DATABASE_URL": f"sqlite:///{args.data / 'savings.sqlite3'}",
    }
    # On a busy shared CPU, two OpenMP threads spinning for each other judged about ten times
    # fewer pairs per CPU second than one (measured on the 2-core CI machine).
    env.setdefault("OMP_NUM_THREADS", "1")
    out: dict[str, Any] = {"pairs": args.pairs, "judge": JUDGE}
    started = time.perf_counter()
    pairs = _shortest(args.data, 0, args.pairs, "pairs")
    _appellate(env, "db", "upgrade")
    _appellate(env, "import", "judgebench", str(pairs), "--benchmark", "jb-savings")
    _appellate(env, "models", "add-smollm2")
    judged = _printed_json(_appellate(env, "judge", "jb-savings", "--model", "smollm2", "--wait"))
    out["judge_result"] = judged["result"]
    out["judge_seconds"] = round(time.perf_counter() - started, 1)
    fit = _printed_json(_appellate(env, "probe", "fit", "jb-savings", "--judge", JUDGE, "--wait"))
    out["fit_result"] = fit["result"]
    savings = json.loads(
        _appellate(
            env, "savings", "jb-savings", "--judge", JUDGE, "--json",
            "--resamples", str(args.resamples),
        )
    )  # fmt: skip
    out["savings"] = {
        key: savings[key] for key in ("n", "flips", "labelled", "unscored", "differences")
    }
    out["savings"]["curves"] = {
        name: {k: v for k, v in c.items() if k != "points"} for name, c in savings["curves"].items()
    }
    out["savings"]["points"] = {
        name: [(p["k"], p["recovered"], p["share_ci"]) for p in c["points"]]
        for name, c in savings["curves"].items()
    }
    if args.second_mode:
        out["two_judges"] = _two_judges(env, args.second_mode, args.resamples)
    if args.rejudge:
        more = _shortest(args.data, args.pairs, args.pairs + args.rejudge, "more")
        _appellate(env, "import", "judgebench", str(more), "--benchmark", "jb-one-order")
        one = _printed_json(
            _appellate(
                env, "judge", "jb-one-order", "--model", "smollm2", "--orders", "AB", "--wait"
            )
        )
        out["one_order_result"] = one["result"]
        redo = _printed_json(
            _appellate(
                env, "rejudge", "jb-one-order", "--judge", JUDGE, "--budget", str(args.budget),
                "--wait",
            )
        )  # fmt: skip
        out["rejudge_result"] = redo["result"]
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
