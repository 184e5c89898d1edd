"""Latency of the benchmark and instance pages with 100,000 seeded instances, on loopback.

Seeds a temporary store with bulk Core inserts, adds an admin user through the users service,
serves the real app with uvicorn in a subprocess, signs in through ``/login`` (a session
cookie, as a browser) and drives it with concurrent httpx clients. Every measured response must
be 200 (a 303 to the sign-in form is an error, not a fast page). Prints JSON: p50/p95 per page
type and server CPU per request, plus the uncached service cost of each filter::

Reference: none; the figures are absolute latencies per (workers, clients) setting and
database, against no other method.

    python benchmarks/pages_bench.py [--instances 100000] [--requests 400] [--concurrency 1,8]
        [--workers 1,2] [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import Engine, insert, text

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.services.evidence.benchmarks import get_benchmark  # noqa: E402
from app.services.table.browse import benchmark_view  # noqa: E402
from app.services.table.facets import benchmark_facets, version_key  # noqa: E402
from app.services.table.instance_filter import (  # noqa: E402
    FlipState,
    InstanceFilter,
    LabelCondition,
    SliceCondition,
)
from app.sql.cache import VersionedCache  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import (  # noqa: E402
    Benchmark,
    Choice,
    Detector,
    Instance,
    Judgment,
    LabelEvent,
    Score,
)
from app.web.filters import query_string  # noqa: E402
from benchmarks.seeding import random_text, text_pool  # noqa: E402
from benchmarks.serving import (  # noqa: E402
    add_user,
    fresh_store,
    get_ok,
    load_average,
    percentiles,
    serve,
    server_cpu_s,
    sign_in,
    stop,
)

BENCHMARK = "bench-pairwise"
JUDGE = "arena_hard/bench-judge"
REWARD_MODELS = ("reward_model/bench-rm-1", "reward_model/bench-rm-2")
SLICES = tuple(f"source-{k}" for k in range(12))


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def seed(engine: Engine, n: int, *, text_chars: int = 1500, rng_seed: int = 0) -> dict[str, Any]:
    """Bulk-insert one pairwise benchmark of ``n`` instances with labels, judgments and scores.

    Every instance gets a ``reference`` label, a ``flip:<judge>`` label where both orders are
    valid (2% also get a later annotator relabel, so "current value" differs from the first
    event), AB and BA judgments of one judge and scores of two reward models.

    Parameters
    ----------
    engine : Engine
        A migrated, empty store.
    n : int
        Number of instances.
    text_chars : int
        Approximate length of each of prompt, response A and response B.
    rng_seed : int
        Seed of the generator, so two runs seed identical data.

    Returns
    -------
    dict
        ``benchmark``, ``n`` and a few external ids to request (``sample_ids``).

    """
    rng = random.Random(rng_seed)
    now = datetime.now(UTC)
    # A pool of texts keeps generation cheap while rows still differ in length and content.
    pool = text_pool(rng, text_chars)
    with engine.begin() as conn:
        bench_id = conn.execute(
            insert(Benchmark).returning(Benchmark.id),
            {
                "name": BENCHMARK,
                "kind": "pairwise",
                "description": "seeded",
                "source": "",
                "licence": "",
                "data_version": 1,
                "created_at": now,
            },
        ).scalar_one()
        det_ids = {}
        for name, kind in [(JUDGE, "judge"), *[(r, "reward_model") for r in REWARD_MODELS]]:
            det_ids[name] = conn.execute(
                insert(Detector).returning(Detector.id),
                {"name": name, "kind": kind, "description": "", "details": {}, "created_at": now},
            ).scalar_one()
    ids: list[str] = []
    event_id = judgment_id = score_id = 0
    for chunk in _chunks(n, 5000):
        instances, events, judgments, scores = [], [], [], []
        for k in chunk:
            iid = k + 1
            ext = f"pair-{k:07d}"
            ids.append(ext)
            instances.append(
                {
                    "id": iid,
                    "benchmark_id": bench_id,
                    "external_id": ext,
                    "group_key": f"q{k // 4}",
                    "created_at": now,
                    "payload": {
                        "prompt": rng.choice(pool),
                        "response_a": rng.choice(pool),
                        "response_b": rng.choice(pool),
                        "source": SLICES[k % len(SLICES)],
                    },
                }
            )
            reference = rng.choice("AB")
            ab = rng.choices(["A", "B", "invalid"], [0.48, 0.48, 0.04])[0]
            ba = ab if rng.random() < 0.65 else rng.choice(["A", "B", "invalid"])
            for order, choice in (("AB", ab), ("BA", ba)):
                judgment_id += 1
                judgments.append(
                    {
                        "id": judgment_id,
                        "instance_id": iid,
                        "detector_id": det_ids[JUDGE],
                        "order": order,
                        "raw_output": random_text(rng, 300) + f" [[{choice}]]",
                        "choice": choice,
                        "confidence": round(rng.uniform(40, 100)),
                        "verdict_logits": None,
                        "mode": "imported",
                        "details": {},
                        "created_at": now,
                    }
                )
            labels = [("reference", reference, "import")]
            if "invalid" not in (ab, ba):
                labels.append((f"flip:{JUDGE}", "1" if ab != ba else "0", "derived"))
            if rng.random() < 0.02:
                labels.append(("reference", "B" if reference == "A" else "A", "annotator"))
            for name, value, source in labels:
                event_id += 1
                events.append(
                    {
                        "id": event_id,
                        "instance_id": iid,
                        "label_name": name,
                        "value": value,
                        "source": source,
                        "author": "",
                        "reason": "",
                        "tags": [],
                        "created_at": now,
                    }
                )
            for rm in REWARD_MODELS:
                score_id += 1
                s = rng.gauss(0, 2)
                scores.append(
                    {
                        "id": score_id,
                        "detector_id": det_ids[rm],
                        "instance_id": iid,
                        "score": s,
                        "details": {"scores": [s, 0.0]},
                        "created_at": now,
                    }
                )
        with engine.begin() as conn:
            conn.execute(insert(Instance), instances)
            conn.execute(insert(LabelEvent), events)
            conn.execute(insert(Judgment), judgments)
            conn.execute(insert(Score), scores)
    if engine.dialect.name == "postgresql":
        # Explicit ids bypass the sequences; move them past the seeded rows.
        with engine.begin() as conn:
            for table in ("instances", "label_events", "judgments", "scores"):
                conn.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT max(id) FROM {table}))"
                    )
                )
        # Steady state after autovacuum: visibility map set, so index-only scans apply.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
    else:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    return {"benchmark": BENCHMARK, "n": n, "sample_ids": rng.sample(ids, min(200, n))}


# ---------------------------------------------------------------------------------------------
# Views measured: each filtered view is also timed uncached, in process, through the service.

FILTERS: dict[str, InstanceFilter] = {
    "flip_yes": InstanceFilter(flip=FlipState.yes),
    "reference_A": InstanceFilter(labels=(LabelCondition(name="reference", value="A"),)),
    "ab_A_ba_B": InstanceFilter(ab=Choice.A, ba=Choice.B),
    "slice": InstanceFilter(slices=(SliceCondition(field="source", value="source-3"),)),
    "score_range": InstanceFilter(score_detector=REWARD_MODELS[0], score_min=1.0, score_max=3.0),
    "combined": InstanceFilter(
        labels=(LabelCondition(name="reference", value="B"),),
        flip=FlipState.no,
        score_min=0.0,
    ),
}
SEARCHES = {"search_rare": "zqxj", "search_common": "court evidence"}


def _drive(
    base: str,
    cookies: httpx.Cookies,
    urls: list[str],
    concurrency: int,
    server_pids: list[int] | None = None,
) -> dict[str, float]:
    """Request every URL once with ``concurrency`` threads, signed in by ``cookies``.

    Returns latency percentiles, the request rate and, given the server's pids, its CPU time
    per request (a figure that other load on the machine barely moves). Any answer but 200
    raises.
    """
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=base, cookies=cookies, limits=limits, timeout=60) as client:

        def one(url: str) -> float:
            t0 = time.perf_counter()
            get_ok(client, url)
            return time.perf_counter() - t0

        cpu0 = server_cpu_s(server_pids) if server_pids else 0.0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            samples = list(pool.map(one, urls))
        wall = time.perf_counter() - t0
        cpu_ms = (server_cpu_s(server_pids) - cpu0) * 1000 / len(urls) if server_pids else 0.0
    out = {**percentiles(samples), "requests": len(urls), "rps": round(len(urls) / wall, 1)}
    if server_pids is not None:
        out["server_cpu_ms_per_request"] = round(cpu_ms, 1)
    return out


def _page_urls(info: dict[str, Any], n_requests: int, rng: random.Random) -> dict[str, list[str]]:
    bench = f"/benchmarks/{quote(info['benchmark'], safe='')}"
    last_page = max(1, info["n"] // 50)
    filtered = [bench + query_string(flt) for flt in FILTERS.values()]
    ids = info["sample_ids"]
    flip = query_string(FILTERS["flip_yes"])
    return {
        "benchmark_first_page": [bench] * n_requests,
        "benchmark_filtered": [filtered[k % len(filtered)] for k in range(n_requests)],
        "benchmark_deep_page": [
            f"{bench}?page={rng.randint(last_page // 2, last_page)}" for _ in range(n_requests)
        ],
        "instance": [
            f"{bench}/instances/{quote(rng.choice(ids), safe='')}" for _ in range(n_requests)
        ],
        "instance_in_filter": [
            f"{bench}/instances/{quote(rng.choice(ids), safe='')}{flip}" for _ in range(n_requests)
        ],
    }


def _timed(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def _cold_costs(store: Store) -> dict[str, float]:
    """Uncached service time of each filtered first page, its count included (best of 3).

    Facets are built once (timed separately) and kept; each filter gets a fresh memo, so
    its count is computed every time, as on the first request after a data change.
    """
    out: dict[str, float] = {}
    with store.factory() as session:
        bench = get_benchmark(session, BENCHMARK)
        out["facets"] = _timed(lambda: benchmark_facets(session, bench), repeat=1)
        facets = benchmark_facets(session, bench)

        def fresh() -> VersionedCache:
            cache = VersionedCache()
            cache.get_or_compute(("facets", *version_key(bench)), lambda: facets)
            return cache

        views = {**FILTERS, **{k: InstanceFilter(q=v) for k, v in SEARCHES.items()}}
        for name, flt in views.items():
            repeat = 1 if name in SEARCHES else 3
            out[name] = _timed(
                lambda flt=flt: benchmark_view(session, BENCHMARK, flt, cache=fresh()),
                repeat=repeat,
            )
    return out


def _ints(csv: str) -> list[int]:
    return [int(x) for x in csv.split(",") if x.strip()]


def _index_ddl(dialect: str) -> str:
    # The expression index proposed for slice filters (see the report); off by default.
    if dialect == "postgresql":
        return (
            "CREATE INDEX ix_instances_slice_source ON instances "
            "(benchmark_id, (payload ->> 'source'))"
        )
    return (
        "CREATE INDEX ix_instances_slice_source ON instances "
        "(benchmark_id, json_extract(payload, '$.source'))"
    )


def _signed_in(base: str, user: str) -> httpx.Cookies:
    """The session cookie of ``user`` after signing in through ``/login``."""
    with httpx.Client(base_url=base, timeout=60) as client:
        sign_in(client, user)
        return httpx.Cookies(client.cookies)


def run_one(dialect: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Seed, serve and measure one database; the temporary database is removed afterwards."""
    with fresh_store(dialect, workdir / dialect) as settings:
        store = Store.open(settings)
        try:
            t0 = time.perf_counter()
            info = seed(store.engine, args.instances, text_chars=args.text_chars)
            seed_s = time.perf_counter() - t0
            if args.proposed_indexes:
                with store.engine.begin() as conn:
                    conn.execute(text(_index_ddl(dialect)))
                    conn.execute(text("ANALYZE"))
            print(f"[{dialect}] seeded {args.instances} in {seed_s:.1f}s", file=sys.stderr)
            cold = _cold_costs(store)
            print(f"[{dialect}] cold service costs {cold}", file=sys.stderr)
        finally:
            store.close()
        user = add_user(settings, "bench-admin")
        runs = []
        for workers in _ints(args.workers):
            server = serve(settings, workers=workers)
            base = server.base
            try:
                cookies = _signed_in(base, user)
                plan = _page_urls(info, args.requests, random.Random(1))
                # Warm-up: every worker process builds its facets and filtered counts once.
                warm = sorted({u for urls in plan.values() for u in urls[:10]})
                _drive(base, cookies, warm * 3 * workers, max(_ints(args.concurrency)))
                for clients in _ints(args.concurrency):
                    pages = {
                        kind: _drive(base, cookies, urls, clients, server.pids)
                        for kind, urls in plan.items()
                    }
                    runs.append({"workers": workers, "clients": clients, "pages": pages})
                    print(f"[{dialect}] {workers=} {clients=}: {pages}", file=sys.stderr)
            finally:
                stop(server)
        result: dict[str, Any] = {
            "seed_s": round(seed_s, 1),
            "runs": runs,
            "uncached_service_ms": cold,
        }
        if dialect == "sqlite":
            db = settings.data_dir / "appellate.sqlite3"
            result["db_size_mb"] = round(db.stat().st_size / 2**20)
        return result


def main() -> None:
    """Parse arguments, run each database and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=400, help="requests per page type")
    parser.add_argument(
        "--concurrency", default="1,8", help="concurrent clients, comma-separated runs"
    )
    parser.add_argument(
        "--workers", default="1,2", help="uvicorn worker processes, comma-separated runs"
    )
    parser.add_argument("--text-chars", type=int, default=1500, help="length of each text")
    parser.add_argument("--databases", default="sqlite", help="sqlite,postgresql")
    parser.add_argument(
        "--proposed-indexes",
        action="store_true",
        help="add the proposed slice expression index before measuring",
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "reference": (
            "none: absolute latencies per (workers, clients) setting and database, "
            "no method compared"
        ),
        "instances": args.instances,
        "requests_per_page_type": args.requests,
        "concurrency": _ints(args.concurrency),
        "workers": _ints(args.workers),
        "text_chars": args.text_chars,
        "proposed_indexes": args.proposed_indexes,
        "cpus": os.cpu_count(),
        "load_average_at_start": load_average(),
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="appellate-pages-bench-") as tmp:
        for dialect in [d.strip() for d in args.databases.split(",") if d.strip()]:
            report["results"][dialect] = run_one(dialect, args, Path(tmp))
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
