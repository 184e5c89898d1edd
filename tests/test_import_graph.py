"""The layering rules of DESIGN.md (issue 11), checked on the import graph with grimp.

Every import statement counts, including those inside functions: a lazy import does not
make a forbidden dependency or a cycle acceptable.
"""

from __future__ import annotations

import graphlib
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
# The CLI is the one place that wires worker commands into ``appellate``: it names them by
# string (app.cli) or imports them inside the command that runs them (app.serve_cli's demo).
CLI_MODULES = {"app.cli", "app.serve_cli"}
HEAVY = ("torch", "transformers", "sklearn", "scipy", "pandas")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", "workers", include_external_packages=True, cache_dir=None)


def _chains(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    if imported not in graph.modules:
        return []
    found = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    return [" -> ".join(chain) for chain in sorted(found)]


def _internal(graph: grimp.ImportGraph, package: str) -> set[str]:
    return {m for m in graph.modules if m == package or m.startswith(package + ".")}


def test_the_graph_sees_the_layers(graph: grimp.ImportGraph) -> None:
    # Guards the checks below against passing on a graph that misses what they look at.
    assert {"app.stats", "app.services", "app.web", "app.cli"} <= graph.modules
    assert graph.direct_import_exists(importer="app.web.api", imported="app.services.browse")
    assert graph.direct_import_exists(importer="workers.models", imported="torch")
    assert _chains(graph, "app.web", "app.services")


@pytest.mark.parametrize("forbidden", ["app.services", "app.web", "sqlalchemy"])
def test_stats_is_pure_numerics(graph: grimp.ImportGraph, forbidden: str) -> None:
    chains = _chains(graph, "app.stats", forbidden)
    assert not chains, f"app.stats must not reach {forbidden}:\n" + "\n".join(chains)


def test_services_reach_neither_the_web_nor_a_cli_nor_torch(graph: grimp.ImportGraph) -> None:
    cli_modules = {m for m in _internal(graph, "app.ingest") if m.endswith("_cli")}
    cli_modules |= {"app.ingest.cli"}
    assert "app.ingest.export_cli" in cli_modules
    chains = []
    for forbidden in ["app.web", "typer", "torch", "transformers", "workers", *sorted(cli_modules)]:
        chains += _chains(graph, "app.services", forbidden)
    assert not chains, "app.services must stay below the web, the CLI and the workers:\n" + (
        "\n".join(chains)
    )


@pytest.mark.parametrize("heavy", ["torch", "transformers"])
def test_nothing_in_app_imports_torch(graph: grimp.ImportGraph, heavy: str) -> None:
    importers = sorted(
        m for m in graph.find_modules_that_directly_import(heavy) if m in _internal(graph, "app")
    )
    assert not importers, f"{heavy} is imported in app/ by {importers}; it belongs in workers/"


def test_only_the_cli_imports_workers(graph: grimp.ImportGraph) -> None:
    # Elsewhere in app/ a workers module would drag torch into the web server or a service.
    direct = graph.find_matching_direct_imports(import_expression="app.** -> workers.**")
    outside = sorted({d["importer"] for d in direct} - CLI_MODULES)
    assert not outside, f"only {sorted(CLI_MODULES)} may import workers.*, not {outside}"


def test_no_import_cycles_inside_services(graph: grimp.ImportGraph) -> None:
    services = _internal(graph, "app.services") - {"app.services"}
    edges = {
        m: {n for n in graph.find_modules_directly_imported_by(m) if n in services}
        for m in services
    }
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as exc:
        cycle = " -> ".join(reversed(exc.args[1]))
        pytest.fail(
            f"import cycle inside app/services: {cycle}. Move what both modules need into a "
            "module both import; a lazy import inside a function does not break a cycle."
        )


def test_importing_the_cli_loads_no_worker_module() -> None:
    # -X importtime lists every module the import loads, lazy command modules excluded.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app.cli"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=True,
    )
    loaded = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "app.cli" in loaded and "typer" in loaded
    workers = sorted(m for m in loaded if m == "workers" or m.startswith("workers."))
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert not workers, f"import app.cli loads {workers}"
    assert not heavy, f"import app.cli loads {heavy}"
