"""The layering rules of the code base, as checks on a grimp import graph.

Each rule takes the graph and the names of the two top packages (``app`` and ``workers`` for
the real tree, other names for the small breaking packages that show each rule can fail) and
returns its violations as readable lines; an empty list means the rule holds. Every import
statement counts, including those inside functions: a lazy import does not make a forbidden
dependency acceptable.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable
from dataclasses import dataclass

import grimp

# Highest first. A wing may import the wings below it, never one above; evidence and accounts
# are independent of each other. A job kind validates against the wings it works on (rankers,
# metric queries), so jobs sit above them; review queues jobs.
SERVICE_WINGS: tuple[str | grimp.Layer, ...] = (
    "review",
    "jobs",
    "disagreements",
    "metrics",
    "table",
    grimp.Layer("evidence", "accounts", independent=True),
)
# The layers of app/: the command line over the server over the web over the importers over
# the services over the SQL helpers.
APP_LAYERS = ("cli", "main", "web", "ingest", "services", "sql")
WORKER_LAYERS = ("cli", "dispatch", "jobs", "runner", "engines")
HEAVY = ("torch", "transformers")


@dataclass(frozen=True)
class Roots:
    """The top package names the rules are stated over."""

    app: str = "app"
    workers: str = "workers"


def _internal(graph: grimp.ImportGraph, package: str) -> set[str]:
    return {m for m in graph.modules if m == package or m.startswith(package + ".")}


def _chains(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    if importer not in graph.modules or imported not in graph.modules:
        return []
    found = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    return [" -> ".join(chain) for chain in sorted(found)]


def _layer_violations(
    graph: grimp.ImportGraph, container: str, layers: tuple[str | grimp.Layer, ...]
) -> list[str]:
    if container not in graph.modules:
        return []
    found = graph.find_illegal_dependencies_for_layers(layers=layers, containers={container})
    lines = []
    for dep in sorted(found, key=lambda d: (d.importer, d.imported)):
        for route in dep.routes:
            chain = [*sorted(route.heads), *route.middle, *sorted(route.tails)]
            lines.append(f"{dep.importer} may not import {dep.imported}: {' -> '.join(chain)}")
    return lines


def services_wings(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """The wings of ``services`` import only the wings below them."""
    return _layer_violations(graph, f"{roots.app}.services", SERVICE_WINGS)


def app_layers(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Cli over main over web over ingest over services over sql."""
    return _layer_violations(graph, roots.app, APP_LAYERS)


def worker_layers(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Cli over dispatch over job handlers over the runner over the engines."""
    return _layer_violations(graph, roots.workers, WORKER_LAYERS)


def services_below_ingest_web_cli(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Services import neither importers, the web, a CLI, typer nor the workers."""
    a = roots.app
    chains = []
    for forbidden in (f"{a}.ingest", f"{a}.web", f"{a}.cli", "typer", roots.workers):
        chains += _chains(graph, f"{a}.services", forbidden)
    return chains


def web_imports_ingest_only_for_export(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """The web reaches the importers only through the exporters (``ingest.export``)."""
    web, ingest = f"{roots.app}.web", f"{roots.app}.ingest"
    export = f"{ingest}.export"
    return sorted(
        f"{d['importer']} imports {d['imported']}"
        for d in graph.find_matching_direct_imports(import_expression=f"{web}.** -> {ingest}.**")
        if not (d["imported"] == export or d["imported"].startswith(export + "."))
    )


def workers_never_import_web(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Workers use the services, never the web layer."""
    return _chains(graph, roots.workers, f"{roots.app}.web")


def nothing_in_app_imports_torch(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Torch and transformers are imported only under ``workers``."""
    app = _internal(graph, roots.app)
    return sorted(
        f"{m} imports {heavy}"
        for heavy in HEAVY
        if heavy in graph.modules
        for m in graph.find_modules_that_directly_import(heavy)
        if m in app
    )


def only_the_cli_imports_workers(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """Elsewhere in app/ a workers module would drag torch into the server or a service."""
    cli = f"{roots.app}.cli"
    direct = graph.find_matching_direct_imports(
        import_expression=f"{roots.app}.** -> {roots.workers}.**"
    )
    return sorted(
        f"{d['importer']} imports {d['imported']}"
        for d in direct
        if not (d["importer"] == cli or d["importer"].startswith(cli + "."))
    )


def stats_is_pure_numerics(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """``stats`` reaches neither the services, the web nor SQLAlchemy."""
    chains = []
    for forbidden in (f"{roots.app}.services", f"{roots.app}.web", "sqlalchemy"):
        chains += _chains(graph, f"{roots.app}.stats", forbidden)
    return chains


def no_cycles_in_services(graph: grimp.ImportGraph, roots: Roots) -> list[str]:
    """No import cycle between service modules (a lazy import does not break one)."""
    services = _internal(graph, f"{roots.app}.services")
    edges = {
        m: {n for n in graph.find_modules_directly_imported_by(m) if n in services}
        for m in services
    }
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as exc:
        return [" -> ".join(reversed(exc.args[1]))]
    return []


Rule = Callable[[grimp.ImportGraph, Roots], list[str]]
RULES: dict[str, Rule] = {
    rule.__name__: rule
    for rule in (
        services_wings,
        app_layers,
        worker_layers,
        services_below_ingest_web_cli,
        web_imports_ingest_only_for_export,
        workers_never_import_web,
        nothing_in_app_imports_torch,
        only_the_cli_imports_workers,
        stats_is_pure_numerics,
        no_cycles_in_services,
    )
}
