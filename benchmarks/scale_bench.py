"""Page cost against benchmark size: N pairwise instances through the importer, the real server.

For each size N (``--sizes``) and database (``--databases``): a fresh store, N pairwise instances
(about ``--text-chars`` characters per text, three detectors, N/4 groups; ``seeding.py``)
imported with ``import_table``, a review queue on the first items, the app served by uvicorn in
a subprocess and signed in through ``/login``. Then, in this order:

- ``first_table_request``: the instance table in its own order, the first benchmark request
  after start-up (the issue's measure), then ``first_sorted_request``: the first page sorted by
  a score (a benchmark of at least ``table_order.KEEP_ORDER_FROM`` instances reads the whole
  order once here; the warm table pages below are slices of it);
- ``metrics_cold``: the metrics page from its first request until a response shows the real
  figures (a metric-matrix row for every detector, no "Computing…" notice), timed the same way
  at every size: up to ``APPELLATE_METRICS_INLINE_ITEMS`` labelled items the first response
  has them (computed in the request), above it the first request queues a ``compute_metrics``
  job (or waits for the benchmark's warm-up, when that is under way), run by the job worker
  started beside the server (``--no-job-worker`` leaves it to another one), and the page is
  polled (every 10% of the time elapsed so far, 0.1 to 2 s) until it shows them. Wall time,
  server CPU (web process and job worker, the polls included) and database CPU cover that
  whole span; ``metrics_cold_detail`` says which way it was computed (and which job), the
  polls, the first response's own time and the matrix rows served;
- ``disagreements_cold``: the first disagreements request (it ranks the list and stores it);
- interleaved rounds (``--requests`` of them; the page order rotates each round) of the warm
  pages: ``table_first`` and ``table_deep`` (sorted by a detector's score, descending; deep:
  random pages in the back half), ``instance``, ``metrics_warm``, ``disagreements`` (threshold
  mode on one detector) and ``queue``.

The import queues the benchmark's ``warm_up`` job as ``appellate import`` does (at least
``WARM_UP_FROM`` instances; ``warm_up_job``), which the job worker runs beside the pages above.
Once every job is done (``jobs_left_done_after_s``), the server is stopped and started again on
the same store (``after_restart``): the first table request, sorted table request, metrics page
and disagreements page of the new process, on a benchmark whose evidence has not changed since
its import.

Per page: p50/p95 wall time, server CPU per request (utime + stime of the server processes from
``/proc``, read before and after each request: the load of the machine barely moves it), on
PostgreSQL the database server's CPU per request (the database's backends, from ``/proc``
through their ``pg_stat_activity`` pids, read before and after each request and every 50 ms
by a thread, ``db_cpu.py``; SQLite runs in the server process, so its CPU is in the server's
and the figure is ``null``) and the median response size; server RSS after start-up, after the
cold requests and at the end, and its high-water mark.

Reference: each page's cost at the next smaller size, measured the same way. Between
consecutive sizes, the growth exponent of each page's p50 wall time, server CPU and database
CPU per request: log(ratio of the values) / log(ratio of N) (1 = linear in N, 0 = flat).
Every measured response must be 200. Prints one JSON object::

    python benchmarks/scale_bench.py [--sizes 10000,100000,1000000]
        [--databases sqlite,postgresql] [--requests 20] [--text-chars 1500]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.settings import Settings  # noqa: E402
from app.web.urls import benchmark_url, disagreements_url, instance_url, metrics_url  # noqa: E402
from benchmarks.db_cpu import DatabaseCpu  # noqa: E402
from benchmarks.seeding import (  # noqa: E402
    BENCHMARK,
    DETECTORS,
    GROUP_SIZE,
    LABEL,
    add_queue,
    external_id,
    queue_warm_up_job,
    seeded_store,
    wait_for_jobs,
)
from benchmarks.serving import (  # noqa: E402
    add_server_options,
    add_user,
    get_ok,
    load_average,
    percentiles,
    serve,
    server_cpu_s,
    server_peak_rss_mib,
    server_rss_mib,
    sign_in,
    stop,
)

WARM_PAGES = (
    "table_first",
    "table_deep",
    "instance",
    "metrics_warm",
    "disagreements",
    "queue",
)
SORT = f"-score:{DETECTORS[0]}"
QUEUE_ITEMS = 500


def page_url(page: str, n: int, queue_id: int, rng: random.Random, page_size: int) -> str:
    """A URL of ``page`` on a benchmark of ``n`` instances (random ones where it varies)."""
    last = max(1, math.ceil(n / page_size))
    if page == "table_first":
        return benchmark_url(BENCHMARK, sort=SORT)
    if page == "table_deep":
        return benchmark_url(BENCHMARK, page=rng.randint(max(1, last // 2), last), sort=SORT)
    if page == "instance":
        return instance_url(BENCHMARK, external_id(rng.randrange(n)))
    if page in ("metrics_warm", "metrics_cold"):
        return metrics_url(BENCHMARK, label=LABEL)
    if page == "disagreements":
        return disagreements_url(BENCHMARK, mode="threshold", detector=DETECTORS[0], label=LABEL)
    if page == "queue":
        return f"/queues/{queue_id}"
    raise ValueError(page)


@dataclass(frozen=True)
class Meters:
    """What a request's cost is read from: the server's processes and the database's backends."""

    pids: list[int]
    database: DatabaseCpu

    def read(self) -> tuple[float, float | None]:
        """Server CPU seconds so far and the database's (``None`` on SQLite)."""
        return server_cpu_s(self.pids), self.database.seconds()


Sample = tuple[float, float, float | None, int]


def _cost(meters: Meters, before: tuple[float, float | None], start: float, size: int) -> Sample:
    """(wall s, server CPU s, database CPU s or ``None``, bytes) since ``before``/``start``."""
    wall = time.perf_counter() - start
    cpu, database = meters.read()
    spent = None if database is None or before[1] is None else database - before[1]
    return wall, cpu - before[0], spent, size


def timed_get(client: httpx.Client, url: str, meters: Meters) -> Sample:
    """GET ``url`` (must answer 200); (wall s, server CPU s, database CPU s, response bytes)."""
    before = meters.read()
    start = time.perf_counter()
    response = get_ok(client, url)
    return _cost(meters, before, start, len(response.content))


PENDING = re.compile(r"<strong>(Computing…|Stale — recomputing)</strong>")
MATRIX_ROW = re.compile(r'<tr class="all" data-detector="([^"]+)"')


def metric_rows(html: str) -> list[str]:
    """The detectors with a row in the metrics page's matrix; none while it is computing."""
    return [] if PENDING.search(html) else MATRIX_ROW.findall(html)


def poll_for_figures(
    client: httpx.Client, url: str, response: httpx.Response, start: float, timeout_s: float
) -> tuple[httpx.Response, int]:
    """Poll the metrics page until it shows every detector's figures; that response, polls.

    ``response`` is the page's last answer and ``start`` (``perf_counter``) when the wait
    began. A page computed in the request shows them at once (0 polls); one whose computation
    runs as a job says "Computing…" (or "Stale — recomputing") until the job has stored the
    result, which needs a job worker. Polls come every 10% of the time so far (0.1 to 2 s,
    the page's own htmx poll): the span is known to about 10%, at few requests.
    """
    polls = 0
    while not set(DETECTORS) <= set(metric_rows(response.text)):
        elapsed = time.perf_counter() - start
        if elapsed > timeout_s:
            raise RuntimeError(f"{url}: no figures after {timeout_s:.0f} s")
        time.sleep(min(2.0, max(0.1, 0.1 * elapsed)))
        response, polls = get_ok(client, url), polls + 1
    return response, polls


def wait_for_metrics(client: httpx.Client, url: str, timeout_s: float) -> int:
    """Request the metrics page until it shows its figures; how many polls that took."""
    _, polls = poll_for_figures(client, url, get_ok(client, url), time.perf_counter(), timeout_s)
    return polls


_PENDING_JOB = re.compile(r'class="notice metrics-pending"[^>]*data-job="(\d+)"')


def metrics_until_ready(
    client: httpx.Client, url: str, meters: Meters, timeout_s: float
) -> tuple[Sample, dict[str, Any]]:
    """The metrics page from its first request until it shows every detector's figures.

    Returns the cost of the whole span (polls included, :func:`poll_for_figures`) and how it
    went: computed in the request or by a job, polls, the first response's time, the rows.
    """
    web = meters.pids[:1]
    before, web_before = meters.read(), server_cpu_s(web)
    start = time.perf_counter()
    first = get_ok(client, url)
    first_ms = round(1000 * (time.perf_counter() - start), 1)
    response, polls = poll_for_figures(client, url, first, start, timeout_s)
    sample = _cost(meters, before, start, len(response.content))
    web_cpu = server_cpu_s(web) - web_before
    # The pending notice names the job computing the figures: a compute_metrics job, or the
    # benchmark's warm-up when the page came while it ran (see computed_by).
    job = _PENDING_JOB.search(first.text)
    detail = {
        "computed_by": "request" if polls == 0 else "job",
        "job_id": int(job.group(1)) if job else None,
        "polls": polls,
        "first_response_ms": first_ms,
        # The server CPU split: the web process (the request, or the queuing and the polls)
        # and the job worker (the job).
        "web_cpu_s": round(web_cpu, 2),
        "job_worker_cpu_s": round(sample[1] - web_cpu, 2),
        "metric_rows": metric_rows(response.text),
    }
    return sample, detail


def summarise(samples: list[Sample]) -> dict[str, Any]:
    """Wall percentiles, mean server and database CPU per request, median size of ``samples``."""
    walls = [s[0] for s in samples]
    database = [s[2] for s in samples]
    return {
        **percentiles(walls),
        "server_cpu_ms_per_request": round(1000 * statistics.fmean(s[1] for s in samples), 1),
        "database_cpu_ms_per_request": (
            None
            if any(d is None for d in database)
            else round(1000 * statistics.fmean(d for d in database if d is not None), 1)
        ),
        "response_kb": round(statistics.median(s[3] for s in samples) / 1000, 1),
    }


def measure(settings: Settings, n: int, queue_id: int, args: argparse.Namespace) -> dict[str, Any]:
    """Serve ``settings``' store, sign in and time every page; see the module docstring."""
    server = serve(settings, job_worker=args.job_worker)
    rng = random.Random(1)
    out: dict[str, Any] = {}
    database = DatabaseCpu(settings.resolved_database_url, sample_every_s=0.05)
    try:
        with database, httpx.Client(base_url=server.base, timeout=args.timeout) as client:
            meters = Meters(server.pids, database)
            out["database_cpu_basis"] = database.basis
            sign_in(client, "bench-admin")
            out["rss_mib_after_start"] = server_rss_mib(server.pids)
            size = settings.page_size
            pages: dict[str, Any] = {}
            first = timed_get(client, benchmark_url(BENCHMARK), meters)
            pages["first_table_request"] = summarise([first])
            sorted_url = page_url("table_first", n, queue_id, rng, size)
            pages["first_sorted_request"] = summarise([timed_get(client, sorted_url, meters)])
            url = page_url("metrics_cold", n, queue_id, rng, size)
            cold, out["metrics_cold_detail"] = metrics_until_ready(
                client, url, meters, args.timeout
            )
            pages["metrics_cold"] = summarise([cold])
            # The disagreement list is ranked and stored by its first request: timed apart, so
            # the warm rounds below measure pages served from the kept list.
            list_url = page_url("disagreements", n, queue_id, rng, size)
            pages["disagreements_cold"] = summarise([timed_get(client, list_url, meters)])
            out["rss_mib_after_cold"] = server_rss_mib(server.pids)
            samples: dict[str, list[Sample]] = {p: [] for p in WARM_PAGES}
            for r in range(args.requests):
                k = r % len(WARM_PAGES)
                for page in WARM_PAGES[k:] + WARM_PAGES[:k]:
                    url = page_url(page, n, queue_id, rng, size)
                    samples[page].append(timed_get(client, url, meters))
            pages.update({page: summarise(s) for page, s in samples.items()})
            out["pages"] = pages
            out["rss_mib_at_end"] = server_rss_mib(server.pids)
            out["peak_rss_mib"] = server_peak_rss_mib(server.pids)
        # The import's warm-up (and any job a page queued) done before the restart: the
        # restarted server meets the store as a later visitor to an unchanged benchmark would.
        if args.job_worker:
            out["jobs_left_done_after_s"] = wait_for_jobs(settings, args.timeout)
    finally:
        stop(server)
    out["after_restart"] = first_requests_after_restart(settings, n, queue_id, args)
    return out


def first_requests_after_restart(
    settings: Settings, n: int, queue_id: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The first table requests of a server started again on the same, already served store.

    What the first start computed and kept in the store (facets, metric results, ranked
    disagreement lists) is read back; what only lived in the stopped process (a sorted
    table's order) is computed again.
    """
    server = serve(settings, job_worker=False)
    rng = random.Random(2)
    database = DatabaseCpu(settings.resolved_database_url, sample_every_s=0.05)
    try:
        with database, httpx.Client(base_url=server.base, timeout=args.timeout) as client:
            meters = Meters(server.pids, database)
            sign_in(client, "bench-admin")
            size = settings.page_size
            urls = {
                "first_table_request": benchmark_url(BENCHMARK),
                "first_sorted_request": page_url("table_first", n, queue_id, rng, size),
                "metrics": page_url("metrics_warm", n, queue_id, rng, size),
                "disagreements": page_url("disagreements", n, queue_id, rng, size),
            }
            return {page: summarise([timed_get(client, url, meters)]) for page, url in urls.items()}
    finally:
        stop(server)


def growth(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Growth exponents of each page's p50 wall and CPU per request between consecutive sizes."""
    sizes = sorted(results, key=int)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for small, big in itertools.pairwise(sizes):
        span = math.log(int(big) / int(small))
        per_page: dict[str, dict[str, float | None]] = {}
        for page, a in results[small]["pages"].items():
            b = results[big]["pages"][page]
            per_page[page] = {
                "p50_wall": _exponent(a["p50_ms"], b["p50_ms"], span),
                "server_cpu": _exponent(
                    a["server_cpu_ms_per_request"], b["server_cpu_ms_per_request"], span
                ),
                "database_cpu": _exponent(
                    a["database_cpu_ms_per_request"], b["database_cpu_ms_per_request"], span
                ),
            }
        out[f"{small}->{big}"] = per_page
    return out


def _exponent(a: float | None, b: float | None, span: float) -> float | None:
    # A CPU reading of 0 (below /proc's 10 ms tick) has no logarithm; SQLite has no database
    # CPU of its own (None).
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return round(math.log(b / a) / span, 2)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every size and database; the JSON report without its header."""
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    results: dict[str, dict[str, Any]] = {db: {} for db in databases}
    for n in sizes:
        csv_path = work / f"pairwise-{n}.csv"
        for db in databases:
            with seeded_store(
                db, n, work / f"{db}-{n}", csv_path, text_chars=args.text_chars,
                keep_template=args.keep_seed,
            ) as (settings, figures):  # fmt: skip
                entry: dict[str, Any] = {"import": figures}
                if csv_path.exists():
                    entry["csv_mb"] = round(csv_path.stat().st_size / 2**20, 1)
                add_user(settings, "bench-admin")
                queue_id = add_queue(settings, min(n, QUEUE_ITEMS), created_by="bench-admin")
                entry["warm_up_job"] = queue_warm_up_job(settings)
                entry.update(measure(settings, n, queue_id, args))
                cold = entry["metrics_cold_detail"]
                if cold["job_id"] is not None:
                    warm = cold["job_id"] == entry["warm_up_job"]
                    cold["computed_by"] = "warm_up job" if warm else "compute_metrics job"
                results[db][str(n)] = entry
            print(f"[{db} {n}] {json.dumps(entry['pages'])}", file=sys.stderr)
        csv_path.unlink(missing_ok=True)
    return {
        "results": results,
        "growth_exponents": {db: growth(r) for db, r in results.items()},
    }


def main() -> None:
    """Parse options, measure and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="instances, a,b,c")
    parser.add_argument("--databases", default="sqlite,postgresql", help="sqlite,postgresql")
    parser.add_argument("--requests", type=int, default=20, help="rounds of the warm pages")
    add_server_options(parser, timeout=1800.0)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "sizes": sorted(int(s) for s in args.sizes.split(",") if s.strip()),
        "detectors": len(DETECTORS),
        "groups": f"N/{GROUP_SIZE}",
        "text_chars": args.text_chars,
        "requests_per_warm_page": args.requests,
        "job_worker": args.job_worker,
        "reference": "each page at the next smaller size, same measurement (growth_exponents)",
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_at_start": load_average(),
    }
    with tempfile.TemporaryDirectory(prefix="appellate-scale-bench-") as tmp:
        report.update(run(args, Path(tmp)))
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
