"""``appellate probe ...``: fit flip and lie-detector probes, apply frozen probes, list them.

Fitting and applying run as jobs (``--wait`` runs or follows them, as for ``appellate judge``);
``probe data ...`` builds the lie-detector datasets.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from app.cli_support import in_store
from app.ingest.lie_cli import lie_app
from app.services.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.probe_requests import (
    APPLY_PROBE_JOB,
    FIT_LIE_PROBE_JOB,
    FIT_PROBE_JOB,
    queue_probe_job,
)
from app.services.probe_store import list_probes
from app.tables import Job
from workers.jobs_cli import submit
from workers.probe_jobs import ApplyParams, FitFlipParams, FitLieParams

probe_app = typer.Typer(no_args_is_help=True, help="Fit, apply and list probes.")
probe_app.add_typer(lie_app, name="data")

Wait = Annotated[bool, typer.Option("--wait", help="Run or follow the job to its end.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu or cuda:N (--wait).")]


@probe_app.command("fit")
def fit(
    benchmark: Annotated[str, typer.Argument(help="Pairwise benchmark the judge judged.")],
    judge: Annotated[str, typer.Option("--judge", help="Judge detector (e.g. smollm2/forced).")],
    activation_set: Annotated[
        str | None, typer.Option("--activation-set", help="Default judge:JUDGE:BENCHMARK.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    wait: Wait = False,
    device: Device = "auto",
) -> None:
    """Flip probe of a judge (nested grouped CV), its baselines, and a frozen copy for transfer."""

    def enqueue(session: Session) -> Job:
        params = FitFlipParams(benchmark, judge, activation_set, seed=seed)
        return queue_probe_job(
            session, FIT_PROBE_JOB, params.__dict__, benchmark=benchmark, detector=judge
        )

    submit(enqueue, wait, device)


@probe_app.command("fit-lie")
def fit_lie(
    benchmark: Annotated[str, typer.Argument(help="Labelled training benchmark (label truth).")],
    model: Annotated[str, typer.Option("--model", help="Registered model.")],
    name: Annotated[str, typer.Option("--name", help="Probe name.")],
    variant: Annotated[
        str, typer.Option("--variant", help=f"One of {', '.join(LIE_VARIANTS)}.")
    ] = "lie",
    layers: Annotated[
        str | None, typer.Option("--layers", help="Comma-separated (default: judge layers).")
    ] = None,
    label: Annotated[str, typer.Option("--label")] = "truth",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    wait: Wait = False,
    device: Device = "auto",
) -> None:
    """Lie-detector probe: layer = earliest with the best validation AUROC; frozen."""
    wanted = [int(x) for x in layers.split(",")] if layers else None

    def enqueue(session: Session) -> Job:
        spec = lie_extract_spec(variant, model, wanted)
        params = FitLieParams(benchmark, name, spec, label=label, seed=seed)
        return queue_probe_job(
            session, FIT_LIE_PROBE_JOB, params.__dict__, benchmark=benchmark, model=model
        )

    submit(enqueue, wait, device)


@probe_app.command("apply")
def apply(
    probe: Annotated[str, typer.Argument(help="A frozen probe (see probe list).")],
    benchmark: Annotated[str, typer.Argument(help="Benchmark to score.")],
    activation_set: Annotated[str | None, typer.Option("--activation-set")] = None,
    text_field: Annotated[
        str | None, typer.Option("--text-field", help="Text probes: payload field to read.")
    ] = None,
    wait: Wait = False,
    device: Device = "auto",
) -> None:
    """Score a benchmark with a frozen probe: no fitting, no recalibration."""
    fields = {"text_field": text_field} if text_field else {}

    def enqueue(session: Session) -> Job:
        params = ApplyParams(probe, benchmark, activation_set, fields)
        return queue_probe_job(session, APPLY_PROBE_JOB, params.__dict__, benchmark=benchmark)

    submit(enqueue, wait, device)


def probe_row(detector: Any) -> dict[str, Any]:
    """A probe or baseline detector as JSON: name, detector kind and its fit details."""
    return {"name": detector.name, "kind": detector.kind, "details": detector.details or {}}


@probe_app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """Probes and baselines with what they were fitted on."""
    rows = in_store(lambda s: [probe_row(d) for d in list_probes(s)])
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no probes yet (try: appellate probe fit BENCHMARK --judge NAME --wait)")
    for r in rows:
        d = r["details"]
        facts = [d.get("kind", ""), d.get("benchmark") or d.get("source_benchmark", "")]
        if isinstance(d.get("oof_auroc"), float):
            facts.append(f"out-of-fold AUROC {d['oof_auroc']:.3f}")
        if d.get("layer") is not None:
            facts.append(f"layer {d['layer']}, lambda {d.get('lambda')}")
        typer.echo(f"{r['name']:<44} {r['kind']:<9} " + "  ".join(str(f) for f in facts if f))
