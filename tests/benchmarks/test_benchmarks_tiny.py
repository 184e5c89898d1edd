"""Every script in benchmarks/ runs once at a tiny size, so a broken benchmark fails the suite.

Each test runs a script as a subprocess with small arguments, parses the JSON it prints and
checks its keys and the values that do not depend on timing (agreement between methods,
counts, statuses); timings are only required to be positive. The SmolLM2-based scripts run the
session's tiny random Llama (``tiny_model_dir``) on CPU. ``first_run_bench.py`` clones and
installs the project and runs the whole demo, which no tiny size shortens; it is left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIALECTS, REPO, one_dialect_of

pytestmark = pytest.mark.slow
BENCHMARKS = REPO / "benchmarks"


# Above this many labelled items the metrics page is computed by a job (the worker's path).
SMALL_INLINE = {"APPELLATE_METRICS_INLINE_ITEMS": "50"}


def run_bench(
    script: str, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 600
) -> dict[str, Any]:
    """Run ``benchmarks/<script>`` with ``args``; the JSON object it prints on stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    assert isinstance(report, dict)
    return report


def positive_timings(page: dict[str, Any], requests: int) -> None:
    """A page's percentiles: ``requests`` samples, ordered, positive."""
    assert page["n"] == requests
    assert 0 < page["p50_ms"] <= page["p95_ms"] <= page["max_ms"]


def test_pages_bench_signs_in_and_every_page_answers_200() -> None:
    report = run_bench(
        "pages_bench.py", "--instances", 200, "--requests", 5, "--concurrency", 1,
        "--workers", 1, "--databases", "sqlite",
    )  # fmt: skip
    result = report["results"]["sqlite"]
    (run,) = result["runs"]
    assert set(run["pages"]) == {
        "benchmark_first_page", "benchmark_filtered", "benchmark_deep_page", "instance",
        "instance_in_filter",
    }  # fmt: skip
    for page in run["pages"].values():
        positive_timings(page, 5)
        assert page["server_cpu_ms_per_request"] >= 0
    assert {"facets", "flip_yes", "search_rare"} <= set(result["uncached_service_ms"])


def test_scale_bench_measures_each_page_and_the_growth_between_sizes() -> None:
    # One store: the script's dialect handling is the same code for both, and the pages it
    # times are tested on both elsewhere; PostgreSQL is where the scale targets live.
    databases = one_dialect_of("postgresql")
    # 100 items: the metrics are computed in the request; 200: by a compute_metrics job (too
    # small for a warm-up).
    report = run_bench(
        "scale_bench.py", "--sizes", "100,200", "--databases", databases, "--requests", 2,
        "--text-chars", 200, env={"APPELLATE_METRICS_INLINE_ITEMS": "150"},
    )  # fmt: skip
    pages = {
        "first_table_request", "first_sorted_request", "metrics_cold", "disagreements_cold",
        "table_first", "table_deep", "instance", "metrics_warm", "disagreements", "queue",
    }  # fmt: skip
    once = ("first_table_request", "first_sorted_request", "metrics_cold", "disagreements_cold")
    assert report["sizes"] == [100, 200]
    assert "smaller size" in report["reference"]
    for db in [databases]:
        for n, computed_by in ((100, "request"), (200, "compute_metrics job")):
            entry = report["results"][db][str(n)]
            assert entry["import"]["instances"] == n
            assert entry["import"]["scores"] == 3 * n
            assert set(entry["pages"]) == pages
            for name, page in entry["pages"].items():
                positive_timings(page, 1 if name in once else 2)
                assert page["response_kb"] > 1  # a page, not a redirect
                assert page["server_cpu_ms_per_request"] >= 0
                database = page["database_cpu_ms_per_request"]
                assert database is None if db == "sqlite" else database >= 0
            # The cold metrics figure is the real computation at both sizes: the response it
            # ends with has every detector's row, whichever way it was computed.
            cold = entry["metrics_cold_detail"]
            assert cold["metric_rows"] == ["det-1", "det-2", "det-3"]
            assert cold["computed_by"] == computed_by
            assert (cold["job_id"] is None) == (computed_by == "request")
            assert (cold["polls"] == 0) == (computed_by == "request")
            assert entry["pages"]["metrics_cold"]["p50_ms"] >= cold["first_response_ms"]
            assert cold["job_worker_cpu_s"] >= 0 and cold["web_cpu_s"] >= 0
            assert 0 < entry["rss_mib_after_start"] <= entry["peak_rss_mib"]
            restarted = entry["after_restart"]
            assert set(restarted) == {
                "first_table_request", "first_sorted_request", "metrics", "disagreements"
            }  # fmt: skip
            for page in restarted.values():
                positive_timings(page, 1)
        growth = report["growth_exponents"][db]["100->200"]
        assert set(growth) == pages
        assert all(set(g) == {"p50_wall", "server_cpu", "database_cpu"} for g in growth.values())


def test_soak_runs_reviewers_without_errors() -> None:
    report = run_bench(
        "soak.py", "--reviewers", 3, "--duration", 10, "--items", 200, "--database", "sqlite",
        "--sample-every", 2, "--think", 0.1, "--text-chars", 300, env=SMALL_INLINE,
    )  # fmt: skip
    assert report["ok"] is True and report["job_worker"] is True
    # 200 items: too few for the warm-up an import queues for a big benchmark.
    assert "warm_up_job" in report and report["warm_up_job"] is None
    assert report["errors_5xx"] == 0 and report["transport_errors"] == {}
    assert report["votes_recorded"] >= 1
    assert set(report["pages"]) <= {
        "table", "instance", "metrics", "disagreements", "queue", "queue_next", "queue_item",
        "vote", "vote_retry",
    }  # fmt: skip
    assert {"table", "instance", "vote"} <= set(report["pages"])
    statuses = {s for page in report["pages"].values() for s in page["statuses"]}
    assert statuses <= {"200", "303", "409"}
    assert set(report["warm_up_ms"]) >= {"metrics_warm", "metrics_until_ready", "queue"}
    assert len(report["rss_mib_samples"]) >= 3
    assert report["rss_growth_last_half_pct"] is not None


def test_import_bench_compares_the_same_sample_with_the_database_cpu() -> None:
    report = run_bench(
        "import_bench.py", "--rows", 300, "--sample-rows", 100, "--rounds", 1,
        "--databases", ",".join(DIALECTS),
    )  # fmt: skip
    assert "naive" in report["reference"]
    for db in DIALECTS:
        entry = report["databases"][db]
        assert entry["fast"]["rows"] == 300 and entry["fast"]["rows_added"] == 900
        assert entry["fast_reimport_unchanged"]["rows_added"] == 0
        same = entry["same_sample"]
        assert len(same["seconds"]["fast"]) == len(same["seconds"]["naive"]) == 1
        assert same["speedup_vs_naive"] > 0 and same["total_cpu_speedup_vs_naive"] > 0
        for run in (entry["fast"], entry["fast_reimport_unchanged"]):
            database = run["database_cpu_s"]
            # SQLite runs in the importing process; PostgreSQL's backends are read apart.
            assert database is None if db == "sqlite" else database >= 0
            assert run["total_cpu_s"] == pytest.approx(run["client_cpu_s"] + (database or 0))
        if db == "postgresql":
            # The naive import's per-row flushes cost the server something.
            assert same["database_cpu"]["naive"][0] > 0


def test_metrics_bench_agrees_with_the_naive_loop_on_fresh_draws() -> None:
    report = run_bench(
        "metrics_bench.py", "--n", 2000, "--groups", 500, "--resamples", 40,
        "--naive-resamples", 5, "--rounds", 2,
    )  # fmt: skip
    assert report["max_abs_difference_vs_naive"] < 1e-9
    assert report["speedup"] > 0 and report["speedup_extrapolated"] > 0
    assert report["vectorised_same_resamples"]["resamples"] == report["naive"]["resamples"] == 5
    assert len(report["vectorised"]["wall_s_runs"]) == 2
    assert set(report["vectorised"]["intervals"]) == {"auroc", "auprc", "brier"}
    assert "naive" in report["reference"]
    # A seed per round, the same for every method in it: nothing drawn is reused.
    seeds = report["round_seeds"]
    assert len(set(seeds)) == len(seeds) == 2
    assert all(used == seeds for used in report["seeds_by_method"].values())
    drawn = report["resamples_drawn_per_round"]
    assert drawn["naive"] == drawn["vectorised_same_resamples"] == [5, 5]
    assert drawn["vectorised"] == [40, 40]


def test_disagreements_bench_times_pages_of_page_rows() -> None:
    from app.web.disagreement_pages import PAGE_ROWS

    report = run_bench(
        "disagreements_bench.py", "--size", 5000, "--databases", ",".join(DIALECTS),
        "--modes", "threshold", "--rounds", 1, "--text-chars", 100,
    )  # fmt: skip
    assert report["page_rows"] == PAGE_ROWS and "direct" in report["reference"]
    for db in DIALECTS:
        mode = report["results"][db]["modes"]["threshold"]
        assert mode["listed"] >= 2 * PAGE_ROWS
        first, later = mode["pages"]
        assert first == "1" and int(later) == mode["listed"] // PAGE_ROWS >= 2
        for page in mode["pages"].values():
            assert page["rows"] == PAGE_ROWS  # every way returned this same page
            for way in ("direct", "cold", "from_store", "warm"):
                assert page[way]["wall_ms"] > 0
                database = page[way]["database_cpu_ms"]
                assert database is None if db == "sqlite" else database >= 0


def test_ranker_metrics_bench() -> None:
    report = run_bench(
        "ranker_metrics_bench.py", "--n", 400, "--groups", 100, "--rankers", 3,
        "--resamples", 40, "--rounds", 2,
    )  # fmt: skip
    assert {"auroc", "auprc", "precision_at_100"} <= set(report["metrics_per_row"])
    assert report["paired_comparisons"] == 2
    assert report["metrics_report_cold_wall_s"] > 0 and len(report["rounds_wall_s"]) == 2
    assert report["max_abs_diff_vs_sklearn"] < 1e-9


def test_ranker_bench() -> None:
    report = run_bench(
        "ranker_bench.py", "--n", 2000, "--models", 5, "--groups", 500, "--rounds", 1,
        "--databases", "sqlite",
    )  # fmt: skip
    sqlite = report["sqlite"]
    assert sqlite["consensus_max_abs_diff_vs_numpy"] < 1e-12
    # The mode lists what cleanlab lists, from kept arrays and from rows, and lists something.
    assert sqlite["cleanlab_same_list"] and sqlite["cleanlab_same_list_from_rows"]
    assert sqlite["cleanlab_issues"] > 0
    assert sqlite["cleanlab_mode_s"] > 0 and sqlite["cleanlab_mode_from_rows_s"] > 0
    assert set(sqlite["under_targets"]) == set(report["targets"])


def test_metrics_job_bench_times_the_cold_computation_against_a_base() -> None:
    databases = one_dialect_of("postgresql")  # as the scale bench: the script, on one store
    report = run_bench(
        "metrics_job_bench.py", "--n", 200, "--databases", databases, "--resamples", 20,
        "--rounds", 2, "--base", "HEAD",
    )  # fmt: skip
    assert report["reference"].startswith("base revision HEAD")
    assert set(report["results"]) == {databases}
    for db, result in report["results"].items():
        assert result["import"]["instances"] == 200
        for tree in ("current", "base"):
            side = result[tree]
            assert len(side["cpu_s_runs"]) == 2 and side["cpu_s"] > 0
            database = side["database_cpu_s_runs"]
            # SQLite's work is the client's own; PostgreSQL's backends are read apart.
            assert database == [None, None] if db == "sqlite" else min(database) >= 0
            assert side["total_cpu_s"] >= side["cpu_s"]
        assert result["cpu_ratio_base_over_current"] > 0
        assert result["total_cpu_ratio_base_over_current"] > 0
        assert result["max_abs_difference_vs_base"] < 1e-9


def test_slice_metrics_bench_point_values_equal() -> None:
    report = run_bench("slice_metrics_bench.py", "--resamples", 20, "--rounds", 2)
    assert report["point_values_equal"] is True
    assert report["slices"] > 1 and report["detectors"] >= 1
    assert len(report["single_pass_runs_s"]) == len(report["per_slice_runs_s"]) == 2


def test_probe_bench_matches_the_reference() -> None:
    report = run_bench("probe_bench.py", "--n", 40, "--d", 8, "--layers", 2, "--repeats", 2)
    assert report["identical_choices"] is True
    assert report["deterministic_across_rounds"] is True
    assert report["max_abs_oof_difference"] <= 1e-6
    assert len(report["ours"]["wall_s_runs"]) == 2


def test_cli_startup_bench_runs_the_entry_points_and_has_the_same_help() -> None:
    # The default base: before the commands were made lazy, found under either path.
    report = run_bench("cli_startup_bench.py", "--rounds", 1)
    assert report["command"] == "appellate --help"
    assert report["reference"].startswith(f"base revision {report['base']}")
    assert report["app_cli_imported_from"]["current"] == "app/cli/__init__.py"
    assert report["app_cli_imported_from"]["base"] == "app/cli.py"  # the flat module then
    assert set(report["median_s"]) == {"base", "current"}
    # Commands added since the base are reported and left out; the rest is the same help.
    assert report["same_help"] is True, report
    assert report["differing_rows"] == {} and report["commands_compared"] >= 10
    assert report["only_in_current"] and all(report["only_in_current"].values())


def test_capture_bench_on_the_tiny_model(tiny_model_dir: Path) -> None:
    report = run_bench(
        "capture_bench.py", "--model-dir", tiny_model_dir, "--n-items", 4, "--batch-size", 2,
        "--min-tokens", 16, "--max-tokens", 24, "--layers", 1, 3, "--repeats", 1,
    )  # fmt: skip
    methods = report["methods"]
    assert report["model_layers"] == 4 and report["layers"] == [1, 3]
    assert methods["limit"]["ratio_to_limit_wall"] == 1.0
    assert methods["naive_output_hidden_states"]["max_abs_diff_vs_ours"] < 1e-4
    assert methods["ours"]["median_wall_s"] > 0
    # Optional wrappers are either measured or say why not.
    for name in ("transformer_lens", "nnsight"):
        assert "median_wall_s" in methods[name] or methods[name]["available"] is False


def test_judge_bench_on_the_tiny_model(tiny_model_dir: Path) -> None:
    report = run_bench(
        "judge_bench.py", "--model-dir", tiny_model_dir, "--pairs", 2, "--batch-size", 2,
        "--max-new-tokens", 2, "--rounds", 1,
    )  # fmt: skip
    assert report["same_generations"] is True
    assert report["same_forced_verdicts"] is True
    assert report["generated_tokens"] == 4
    assert report["capture_overhead_ratio"] > 0


def test_lie_probe_bench_on_the_tiny_model(tiny_model_dir: Path) -> None:
    report = run_bench(
        "lie_probe_bench.py", "--model-dir", tiny_model_dir, "--n-facts", 15, "--n-control", 10,
        "--max-new-tokens", 3, "--layers", 0, 2, 4, "--fpr", 0.2, "--resamples", 50,
        "--batch-size", 4,
    )  # fmt: skip
    assert report["items"] == 30 and report["model_layers"] == 4
    assert report["capture"]["ratio_per_position_to_one_pass"] > 0
    expected = {"statement_end/lat", "statement_end/mass_mean_iid", "response/token_logistic_max"}
    assert expected <= set(report["probes"])
    for probe in report["probes"].values():
        assert probe["layer"] in (0, 2, 4) and len(probe["test_auroc_curve"]) == 3
        op = probe["at_fpr"]
        if op is None:  # end_of_turn with no control reply that closed its turn
            continue
        allowed = 0.2 * op["n_control"]
        assert allowed - 1 < op["flagged"] <= allowed  # within one item, never above
        assert op["tpr_exact_ci"][0] <= op["tpr"] <= op["tpr_exact_ci"][1]


def test_critic_bench_on_the_tiny_model(tiny_model_dir: Path) -> None:
    report = run_bench(
        "critic_bench.py", "--model-dir", tiny_model_dir, "--subjects", "astronomy",
        "--items", 4, "--modes", "forced", "--batch-size", 4, "--resamples", 20,
    )  # fmt: skip
    (run,) = report["runs"]
    assert (run["items"], run["scored"], run["retention"], run["n"]) == (4, 4, 1.0, 4)
    assert run["with_probability"] == 4 and run["invalid"] == {}
    assert run["job_wall_s"] > 0


@pytest.mark.skipif("postgresql" not in DIALECTS, reason="templates are PostgreSQL databases")
def test_a_kept_seed_is_imported_once_and_copied_for_each_run(tmp_path: Path) -> None:
    from sqlalchemy import func, select, text

    from app.store import Store
    from app.tables import Instance
    from benchmarks.seeding import seeded_store, template_name
    from benchmarks.serving import pg_admin

    n, chars = 37, 120  # a size no real run uses: its template is this test's own
    name = template_name(n, chars)
    with pg_admin() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    try:
        seen = []
        for run in range(2):
            csv_path = tmp_path / f"seed-{run}.csv"
            with seeded_store(
                "postgresql", n, tmp_path / f"store-{run}", csv_path, text_chars=chars,
                keep_template=True,
            ) as (settings, figures):  # fmt: skip
                store = Store.open(settings)
                try:
                    with store.factory() as s:
                        count = s.scalar(select(func.count()).select_from(Instance))
                finally:
                    store.close()
                # A copy: what a run writes never reaches the template or the next run.
                assert settings.database_url and name not in settings.database_url
            seen.append((figures, count, csv_path.exists()))
        (first, n1, wrote1), (second, n2, wrote2) = seen
        assert first["template"] == second["template"] == name
        assert first["template_reused"] is False and first["instances"] == n
        assert second["template_reused"] is True and "instances" not in second
        assert n1 == n2 == n
        assert wrote1 and not wrote2  # the second run imported nothing
    finally:
        with pg_admin() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
