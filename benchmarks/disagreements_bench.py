"""Disagreement pages in process: ranked per request (as before) against the kept ranked list.

For each database (``--databases``): a fresh store, N pairwise instances (``--size``; three
detectors, ``seeding.py``) imported with ``import_table``; then, for each mode (``--modes``),
the list the disagreements page asks for (its default length, ``DEFAULT_LIMIT`` listed items)
and two of its pages as a user pages through it: page 1 and a later page (``--page``; default
the last full page), each of ``PAGE_ROWS`` rows (``app/web/disagreement_pages.py``: the rows the
HTML page shows), with their previews. Each page is computed four ways in interleaved rounds
(``--rounds``; the order rotates each round):

- ``direct``: what every request did before lists were kept: the mode finds and ranks every
  item, the page's rows are sliced and their previews read (:func:`rank_directly`,
  ``with_previews``);
- ``cold``: the kept path with nothing kept: ranked, stored, the page built;
- ``from_store``: this process's cache cleared (another process, or a restart): the list read
  from ``disagreement_results``;
- ``warm``: the list in this process's cache: only the page's rows are built and previewed.

Reference: ``direct``, on the same page of the same list in the same rounds. Every way must
return the same page, of ``PAGE_ROWS`` rows. Per mode, page and way: median wall and client CPU
milliseconds, and on PostgreSQL the database server's CPU (its backends' CPU read from
``/proc`` before and after each run, ``db_cpu.py``; SQLite's is the client's, ``null``); per
mode: the list's length and its stored size. Prints one JSON object::

    python benchmarks/disagreements_bench.py [--size 100000] [--databases sqlite,postgresql]
        [--modes threshold,consensus,margin] [--rounds 5] [--page N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.db import transaction  # noqa: E402
from app.services.disagreements.disagreement_query import build_query  # noqa: E402
from app.services.disagreements.disagreement_results import (  # noqa: E402
    DISAGREEMENT_CACHE,
    ListRequest,
    rank_directly,
)
from app.services.disagreements.lists import find_disagreements  # noqa: E402
from app.services.disagreements.modes import get_mode  # noqa: E402
from app.services.disagreements.modes.base import Disagreement  # noqa: E402
from app.services.disagreements.modes.previews import with_previews  # noqa: E402
from app.services.evidence.benchmarks import get_benchmark  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import DisagreementResult  # noqa: E402
from app.web.disagreement_pages import DEFAULT_LIMIT, PAGE_ROWS  # noqa: E402
from benchmarks.db_cpu import DatabaseCpu  # noqa: E402
from benchmarks.rounds import run_metered_rounds  # noqa: E402
from benchmarks.seeding import (  # noqa: E402
    BENCHMARK,
    DETECTORS,
    LABEL,
    import_pairwise,
    write_pairwise_csv,
)
from benchmarks.serving import fresh_store, load_average  # noqa: E402

# The modes measured and their detectors (consensus: two of the three at 0.6; the seeded
# detectors rarely agree at the default cut).
QUERIES = {
    "threshold": build_query("threshold", DETECTORS[:1], label=LABEL),
    "cleanlab": build_query("cleanlab", DETECTORS[:1], label=LABEL),
    "consensus": build_query(
        "consensus", DETECTORS, label=LABEL, values={"k": 2, "min_confidence": 0.6}
    ),
    "margin": build_query("margin", DETECTORS[:1], label=LABEL),
}

Page = list[tuple[Disagreement, str]]
WAYS = ("direct", "cold", "from_store", "warm")


def _page(items: list[Disagreement]) -> Page:
    return [(d, d.preview) for d in items]


def measure_mode(
    store: Store, meter: DatabaseCpu, mode: str, rounds: int, later: int | None
) -> dict[str, Any]:
    """Page 1 and page ``later`` of one mode's list, four ways each, interleaved; see above."""
    query = QUERIES[mode].with_limit(DEFAULT_LIMIT)
    spec = get_mode(query.mode)
    names = list(query.detectors)
    request = ListRequest.of(spec, names, LABEL, None, spec.settle(names, query.values))

    def ways(start: int, stop: int) -> dict[str, Callable[[], tuple[Page, int]]]:
        def direct() -> tuple[Page, int]:
            with transaction(store.factory) as session:
                bench = get_benchmark(session, BENCHMARK)
                found, _ = rank_directly(session, bench, request)
                rows = found[:DEFAULT_LIMIT][start:stop]
                return _page(with_previews(session, bench, rows)), len(found)

        def kept() -> tuple[Page, int]:
            with transaction(store.factory) as session:
                result = find_disagreements(session, BENCHMARK, query, page=(start, stop))
                return _page(result.items), result.total

        def cold() -> tuple[Page, int]:
            DISAGREEMENT_CACHE.clear()
            with transaction(store.factory) as session:
                session.execute(delete(DisagreementResult))
            return kept()

        def from_store() -> tuple[Page, int]:
            DISAGREEMENT_CACHE.clear()
            return kept()

        return {"direct": direct, "cold": cold, "from_store": from_store, "warm": kept}

    # Also so that the first "warm" and "from_store" runs have a list to read.
    _, total = ways(0, PAGE_ROWS)["warm"]()
    listed = min(DEFAULT_LIMIT, total)
    last_full = listed // PAGE_ROWS
    later = last_full if later is None else later
    if not 2 <= later <= last_full:
        raise ValueError(
            f"{mode}: {listed} listed items make {last_full} full pages of {PAGE_ROWS} rows; "
            f"page {later} is not a later full one (a larger --size lists more)"
        )
    pages: dict[str, Any] = {}
    for number in (1, later):
        start = (number - 1) * PAGE_ROWS
        methods = ways(start, start + PAGE_ROWS)
        wall, cpu, database, outputs = run_metered_rounds(methods, rounds, meter.seconds)
        if any(out != outputs["direct"] for out in outputs.values()):
            raise AssertionError(f"{mode} page {number}: the kept list's page differs")
        pages[str(number)] = {
            "rows": len(outputs["direct"][0]),
            **{
                name: {
                    "wall_ms": _ms(wall[name]),
                    "cpu_ms": _ms(cpu[name]),
                    "database_cpu_ms": _ms(database[name]),
                }
                for name in methods
            },
        }
    with store.factory() as session:
        stored = session.scalar(
            select(func.length(DisagreementResult.payload)).where(DisagreementResult.mode == mode)
        )
    return {
        "total": total,
        "listed": listed,
        "stored_kb": round((stored or 0) / 1024, 1),
        "pages": pages,
    }


def _ms(seconds: list[float] | list[float | None]) -> float | None:
    """The median in milliseconds; ``None`` where a reading is (the database's, on SQLite)."""
    if any(s is None for s in seconds):
        return None
    return round(1000 * statistics.median(s for s in seconds if s is not None), 1)


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Seed each database once and measure every mode on it."""
    csv_path = tmp / "pairs.csv"
    write_pairwise_csv(csv_path, args.size, text_chars=args.text_chars)
    results: dict[str, Any] = {}
    for dialect in args.databases.split(","):
        with fresh_store(dialect, tmp / dialect) as settings:
            imported = import_pairwise(settings, csv_path)
            store = Store.open(settings)
            try:
                with DatabaseCpu(settings.resolved_database_url) as meter:
                    results[dialect] = {
                        "import": imported,
                        "database_cpu_basis": meter.basis,
                        "modes": {
                            m: measure_mode(store, meter, m, args.rounds, args.page)
                            for m in args.modes.split(",")
                        },
                    }
            finally:
                DISAGREEMENT_CACHE.clear()
                store.close()
        print(f"[{dialect}] {json.dumps(results[dialect])}", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse options, measure, print and return the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="pairwise instances")
    parser.add_argument("--databases", default="sqlite,postgresql", help="sqlite,postgresql")
    parser.add_argument("--modes", default="threshold,consensus,margin", help=", ".join(QUERIES))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument(
        "--page", type=int, default=None, help="the later page timed (default: the last full one)"
    )
    parser.add_argument("--text-chars", type=int, default=1500, help="characters per text")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "size": args.size,
        "listed_items_per_list": DEFAULT_LIMIT,
        "page_rows": PAGE_ROWS,
        "reference": "direct: every item found and ranked per request, the page sliced",
        "rounds": args.rounds,
        "load_average_at_start": load_average(),
    }
    with tempfile.TemporaryDirectory(prefix="appellate-disagreements-bench-") as tmp:
        report["results"] = run(args, Path(tmp))
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
