"""Soak: concurrent simulated reviewers against the real server for a while; latency, errors, RSS.

Seeds a fresh store (``--items`` pairwise instances through the importer, as ``scale_bench.py``
does; a review queue of two votes per item on the first ones; the benchmark's ``warm_up`` job
queued as ``appellate import`` queues it, ``warm_up_job``), adds one reviewer user per
simulated reviewer, serves the app with uvicorn and warms every page once (timed apart). Then
``--reviewers`` threads, each signed in through ``/login`` with its own session, repeat for
``--duration`` seconds a random mix of reads of the instance table (first or deep pages),
instance pages, the metrics page, the disagreements page and the queue page, and votes (next
item, its page, the vote posted with the session's CSRF token, posted again on the current
version after a 409), pausing ``--think`` seconds on
average between actions. The server's RSS is sampled every ``--sample-every`` seconds.

Prints one JSON object: p50/p95 per page, answers by status, 5xx and transport errors (any is a
failure: ``ok`` is false), votes recorded and stale-vote conflicts (409, expected when two
reviewers vote on one item at once), server CPU per request, and the RSS samples with the growth
over the last half of the run::

Reference: none; the figures are absolute (latencies, errors, RSS growth).

    python benchmarks/soak.py [--reviewers 20] [--duration 600] [--items 1000000]
        [--database postgresql] [--think 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scale_bench import page_url, wait_for_metrics  # noqa: E402
from benchmarks.seeding import add_queue, queue_warm_up_job, seeded_store  # noqa: E402
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

# Relative frequency of each action of a reviewer.
ACTIONS = {
    "table": 3,
    "instance": 3,
    "metrics": 1,
    "disagreements": 1,
    "queue": 1,
    "vote": 2,
}
QUEUE_ITEMS = 2000
_VERSION = re.compile(r'name="version" value="(\d+)"')
_CHOICE = re.compile(r'name="value" value="([^"]+)" data-key=')
_ITEM = re.compile(r"/queues/\d+/items/(\d+)")


@dataclass
class Tally:
    """What every reviewer saw, kept under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    transport_errors: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, page: str, seconds: float, response: httpx.Response) -> None:
        """Record one answer; a 5xx keeps the start of its body as an example."""
        with self.lock:
            self.seconds.setdefault(page, []).append(seconds)
            self.statuses.setdefault(page, Counter())[response.status_code] += 1
            if response.status_code >= 500 and len(self.examples) < 5:
                self.examples.append(f"{page} {response.request.url}: {response.text[:300]}")

    def failed(self, page: str, exc: Exception) -> None:
        """Record a request that got no answer (timeout, connection reset)."""
        with self.lock:
            self.transport_errors[page] += 1
            if len(self.examples) < 5:
                self.examples.append(f"{page}: {type(exc).__name__}: {exc}")


def _request(
    client: httpx.Client, tally: Tally, page: str, method: str, url: str, **kw: Any
) -> httpx.Response | None:
    start = time.perf_counter()
    try:
        response = client.request(method, url, follow_redirects=False, **kw)
    except httpx.TransportError as exc:
        tally.failed(page, exc)
        return None
    tally.add(page, time.perf_counter() - start, response)
    return response


def _vote(client: httpx.Client, tally: Tally, csrf: str, queue_id: int, rng: random.Random) -> None:
    """Ask for the next item, open it and vote one of its choices (nothing when all are done)."""
    nxt = _request(client, tally, "queue_next", "GET", f"/queues/{queue_id}/next")
    target = nxt.headers.get("location", "") if nxt is not None else ""
    found = _ITEM.search(target)
    if found is None:
        return
    item = _request(client, tally, "queue_item", "GET", target)
    if item is None or item.status_code != 200:
        return
    version, choices = _VERSION.search(item.text), _CHOICE.findall(item.text)
    if version is None or not choices:
        raise RuntimeError(f"{target}: no vote form")
    url = f"/queues/{queue_id}/items/{found.group(1)}/vote"
    form = {"csrf_token": csrf, "version": version.group(1), "value": rng.choice(choices)}
    done = _request(client, tally, "vote", "POST", url, data=form)
    if done is not None and done.status_code == 409:
        # Another reviewer voted first: the 409 page shows the item as it is now, and a
        # reviewer votes again on that version.
        again = _VERSION.search(done.text)
        if again is not None:
            form["version"] = again.group(1)
            _request(client, tally, "vote_retry", "POST", url, data=form)


def reviewer(
    base: str, name: str, queue_id: int, n: int, until: float, tally: Tally, args: Any, seed: int
) -> None:
    """One simulated reviewer: sign in, then random actions until ``until`` (monotonic)."""
    rng = random.Random(seed)
    actions, weights = list(ACTIONS), list(ACTIONS.values())
    with httpx.Client(base_url=base, timeout=args.timeout) as client:
        csrf = sign_in(client, name)
        while time.monotonic() < until:
            action = rng.choices(actions, weights)[0]
            if action == "vote":
                _vote(client, tally, csrf, queue_id, rng)
            else:
                page = {
                    "table": rng.choice(("table_first", "table_deep")),
                    "metrics": "metrics_warm",
                }.get(action, action)
                url = page_url(page, n, queue_id, rng, args.page_size)
                _request(client, tally, action, "GET", url)
            if args.think > 0:
                time.sleep(rng.uniform(0, 2 * args.think))


def sample_rss(
    pids: list[int], every: float, stop_at: float, out: list[tuple[float, float]]
) -> None:
    """Append (seconds since start, server RSS MiB) every ``every`` seconds until ``stop_at``."""
    start = time.monotonic()
    while True:
        now = time.monotonic()
        out.append((round(now - start, 1), server_rss_mib(pids)))
        if now >= stop_at:
            return
        time.sleep(min(every, max(0.0, stop_at - now)))


def last_half_growth_pct(samples: list[tuple[float, float]], duration: float) -> float | None:
    """RSS growth from the first sample of the run's second half to the last sample, percent."""
    late = [rss for t, rss in samples if t >= duration / 2]
    if len(late) < 2 or late[0] <= 0:
        return None
    return round(100 * (late[-1] - late[0]) / late[0], 1)


def warm_up(base: str, user: str, queue_id: int, n: int, args: Any) -> dict[str, float]:
    """Request every page once before the clock starts (the metrics until they are computed)."""
    rng = random.Random(0)
    out = {}
    pages = ("table_first", "table_deep", "instance", "metrics_warm", "disagreements", "queue")
    with httpx.Client(base_url=base, timeout=args.timeout) as client:
        sign_in(client, user)
        for page in pages:
            start = time.perf_counter()
            url = page_url(page, n, queue_id, rng, args.page_size)
            get_ok(client, url)
            out[page] = round(1000 * (time.perf_counter() - start), 1)
            if page == "metrics_warm":
                wait_for_metrics(client, url, args.timeout)
                out["metrics_until_ready"] = round(1000 * (time.perf_counter() - start), 1)
    return out


def soak(settings: Any, queue_id: int, users: list[str], args: Any) -> dict[str, Any]:
    """Serve the store, warm it and run the reviewers; the measured part of the report."""
    server = serve(settings, job_worker=args.job_worker)
    base, pids = server.base, server.pids
    try:
        warm = warm_up(base, users[0], queue_id, args.items, args)
        tally = Tally()
        samples: list[tuple[float, float]] = []
        cpu0 = server_cpu_s(pids)
        until = time.monotonic() + args.duration
        sampler = threading.Thread(
            target=sample_rss, args=(pids, args.sample_every, until, samples)
        )
        threads = [
            threading.Thread(
                target=reviewer,
                args=(base, user, queue_id, args.items, until, tally, args, 1000 + i),
            )
            for i, user in enumerate(users)
        ]
        sampler.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sampler.join()
        cpu = server_cpu_s(pids) - cpu0
        peak = server_peak_rss_mib(pids)
    finally:
        stop(server)
    requests = sum(len(s) for s in tally.seconds.values())
    errors_5xx = {
        page: sum(n for status, n in counts.items() if status >= 500)
        for page, counts in tally.statuses.items()
    }
    return {
        "warm_up_ms": warm,
        "pages": {
            page: {
                **percentiles(s),
                "statuses": {str(k): v for k, v in sorted(tally.statuses[page].items())},
            }
            for page, s in sorted(tally.seconds.items())
        },
        "requests": requests,
        "votes_recorded": sum(
            tally.statuses.get(page, Counter())[303] for page in ("vote", "vote_retry")
        ),
        "stale_vote_conflicts": sum(
            tally.statuses.get(page, Counter())[409] for page in ("vote", "vote_retry")
        ),
        "errors_5xx": sum(errors_5xx.values()),
        "errors_5xx_by_page": {p: n for p, n in errors_5xx.items() if n},
        "transport_errors": dict(tally.transport_errors),
        "error_examples": tally.examples,
        "server_cpu_ms_per_request": round(1000 * cpu / max(1, requests), 1),
        "rss_mib_samples": samples,
        "rss_growth_last_half_pct": last_half_growth_pct(samples, args.duration),
        "peak_rss_mib": peak,
    }


def main() -> None:
    """Parse options, seed, soak and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviewers", type=int, default=20)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--database", default="postgresql", choices=("sqlite", "postgresql"))
    parser.add_argument("--think", type=float, default=0.5, help="mean pause between actions, s")
    parser.add_argument("--sample-every", type=float, default=10.0, help="RSS sampling period, s")
    add_server_options(parser, timeout=600.0)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "reference": "none: absolute latencies, errors and RSS growth under load",
        "reviewers": args.reviewers,
        "duration_s": args.duration,
        "items": args.items,
        "database": args.database,
        "think_s": args.think,
        "job_worker": args.job_worker,
        "action_weights": ACTIONS,
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_at_start": load_average(),
    }
    with tempfile.TemporaryDirectory(prefix="appellate-soak-") as tmp:
        work = Path(tmp)
        with seeded_store(
            args.database, args.items, work / "store", work / "items.csv",
            text_chars=args.text_chars, keep_template=args.keep_seed,
        ) as (settings, figures):  # fmt: skip
            args.page_size = settings.page_size
            report["import"] = figures
            (work / "items.csv").unlink(missing_ok=True)
            users = [
                add_user(settings, f"reviewer-{i:02d}", "reviewer") for i in range(args.reviewers)
            ]
            queue_id = add_queue(settings, min(args.items, QUEUE_ITEMS), created_by=users[0])
            report["warm_up_job"] = queue_warm_up_job(settings)
            report.update(soak(settings, queue_id, users, args))
    report["load_average_at_end"] = load_average()
    report["ok"] = report["errors_5xx"] == 0 and not report["transport_errors"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
