"""First run of the demo: seconds per phase from a fresh clone until the dashboard answers 200.

Clones this repository into a temporary folder, runs ``scripts/install.sh`` there (the pip
cache decides how long that takes: warm it with one earlier run), then starts
``appellate demo`` on a free port with its own data folder and timestamps each line it
prints. Each line ends a phase (the import of a file, the rankers, the demo model, ...), so a
phase lasts from the previous line to its own; the last phase ends with the first HTTP 200
from ``/login``. Prints JSON. Reference: none; a timeline, nothing compared.

    .venv/bin/python benchmarks/first_run_bench.py [--tree PATH] [--keep]

``--tree`` reuses an installed checkout instead of cloning and installing (install = null).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 900.0

# A printed line -> the phase it ends (first match wins); others end the phase "other".
PHASES: list[tuple[str, re.Pattern[str]]] = [
    ("import judgebench", re.compile(r"^judgebench:")),
    ("import statements", re.compile(r"^(truth|real-world-scenarios):")),
    ("mmlu-redux rankers", re.compile(r"^mmlu-redux: rankers")),
    ("import mmlu-redux", re.compile(r"^mmlu-redux:")),
    ("demo model", re.compile(r"smollm2|SmolLM2|demo model", re.IGNORECASE)),
    ("admin link", re.compile(r"^sign in as admin")),
    ("server start", re.compile(r"^(Appellate dashboard|job worker)")),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _phase(line: str) -> str:
    return next((name for name, pattern in PHASES if pattern.search(line)), "other")


def _timed(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _lines(stream: object) -> Iterator[str]:
    yield from stream  # type: ignore[misc]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run_demo(tree: Path, data_dir: Path) -> dict[str, object]:
    """Start the demo in ``tree``; seconds per phase until ``/login`` answers 200."""
    port = _free_port()
    env = {
        **os.environ,
        "APPELLATE_DATA_DIR": str(data_dir),
        "APPELLATE_DATABASE_URL": f"sqlite:///{data_dir / 'appellate.sqlite3'}",
        "APPELLATE_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    start = time.perf_counter()
    demo = subprocess.Popen(
        [str(tree / ".venv" / "bin" / "appellate"), "demo", "--device", "cpu"],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    printed: queue.Queue[tuple[float, str]] = queue.Queue()

    def pump() -> None:
        for line in _lines(demo.stdout):
            printed.put((time.perf_counter() - start, line.rstrip("\n")))

    threading.Thread(target=pump, daemon=True).start()
    phases: dict[str, float] = {}
    log: list[tuple[float, str]] = []
    last = 0.0
    url = f"http://127.0.0.1:{port}/login"
    try:
        while not _answers(url):
            if demo.poll() is not None or time.perf_counter() - start > TIMEOUT_S:
                raise RuntimeError(f"demo ended or timed out: {log[-5:]}")
            while not printed.empty():
                at, line = printed.get()
                log.append((round(at, 2), line))
                phase = _phase(line)
                phases[phase] = phases.get(phase, 0.0) + at - last
                last = at
            time.sleep(0.1)
        answered = time.perf_counter() - start
        phases["until first 200"] = answered - last
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(timeout=90)
        except subprocess.TimeoutExpired:
            demo.kill()
    return {
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "demo_until_first_200_s": round(answered, 2),
        "exit_code_after_sigterm": demo.returncode,
        "lines": log,
    }


def main() -> None:
    """Parse options, run the phases, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, help="an installed checkout (skip clone+install)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="appellate-first-run-"))
    out: dict[str, object] = {
        "reference": "none: a timeline of phases",
        "cpus": len(os.sched_getaffinity(0)),
    }
    try:
        if args.tree is None:
            tree = work / "clone"
            out["clone_s"] = round(_timed(["git", "clone", "-q", str(ROOT), str(tree)], work), 2)
            install = _timed(["./scripts/install.sh"], tree)
            out["install_s"] = round(install, 2)
        else:
            tree, out["install_s"] = args.tree.resolve(), None
        demo = run_demo(tree, work / "data")
        out.update(demo)
        before = sum(v for k, v in out.items() if k in ("clone_s", "install_s") and v)
        out["total_until_first_200_s"] = round(before + float(demo["demo_until_first_200_s"]), 2)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
