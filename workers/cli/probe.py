"""``appellate probe ...``: fit flip and lie-detector probes, apply frozen probes, list them.

Fitting and applying run as jobs (``--wait`` runs or follows them, as for ``appellate judge``);
``probe data ...`` builds the lie-detector datasets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from app.cli.lie import lie_app
from app.cli.support import JsonArrayOption, echo_rows, in_store
from app.services.evidence.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.evidence.probe_store import list_probes
from app.services.jobs.probes import (
    APPLY_PROBE_JOB,
    FIT_LIE_PROBE_JOB,
    FIT_PROBE_JOB,
    FIT_SET_PROBE_JOB,
    queue_probe_job,
)
from workers.cli.jobs import DeviceOption, WaitOption, submit
from workers.jobs.probes import ApplyParams, FitFlipParams, FitLieParams
from workers.jobs.set_probe import FitSetParams

probe_app = typer.Typer(no_args_is_help=True, help="Fit, apply and list probes.")
probe_app.add_typer(lie_app, name="data")


def _submit_probe(
    kind: str, make: Callable[[], Any], wait: bool, device: str, **named: str | None
) -> None:
    """Queue a probe job with the parameters ``make()`` builds, once what ``named`` exists."""
    submit(lambda s: queue_probe_job(s, kind, make().__dict__, **named), wait, device)


@probe_app.command("fit")
def fit(
    benchmark: Annotated[str, typer.Argument(help="Pairwise benchmark the judge judged.")],
    judge: Annotated[str, typer.Option("--judge", help="Judge detector (e.g. smollm2/forced).")],
    activation_set: Annotated[
        str | None, typer.Option("--activation-set", help="Default judge:JUDGE:BENCHMARK.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
) -> None:
    """Flip probe of a judge (nested grouped CV), its baselines, and a frozen copy for transfer."""
    _submit_probe(
        FIT_PROBE_JOB,
        lambda: FitFlipParams(benchmark, judge, activation_set, seed=seed),
        wait,
        device,
        benchmark=benchmark,
        detector=judge,
    )


@probe_app.command("fit-set")
def fit_set(
    benchmark: Annotated[str, typer.Argument(help="Benchmark whose items were captured.")],
    activation_set: Annotated[
        str, typer.Option("--activation-set", help="e.g. choice:smollm2/choice:mmlu.")
    ],
    label: Annotated[str, typer.Option("--label", help="Binary label set, e.g. defect.")],
    seed: Annotated[int, typer.Option("--seed")] = 0,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
) -> None:
    """Probe of any binary label set on an activation set (nested CV grouped by item group)."""
    _submit_probe(
        FIT_SET_PROBE_JOB,
        lambda: FitSetParams(benchmark, activation_set, label, seed=seed),
        wait,
        device,
        benchmark=benchmark,
    )


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
    wait: WaitOption = False,
    device: DeviceOption = "auto",
) -> None:
    """Lie-detector probe: layer = earliest with the best validation AUROC; frozen."""
    wanted = [int(x) for x in layers.split(",")] if layers else None

    def params() -> FitLieParams:
        spec = lie_extract_spec(variant, model, wanted)
        return FitLieParams(benchmark, name, spec, label=label, seed=seed)

    _submit_probe(FIT_LIE_PROBE_JOB, params, wait, device, benchmark=benchmark, model=model)


@probe_app.command("apply")
def apply(
    probe: Annotated[str, typer.Argument(help="A frozen probe (see probe list).")],
    benchmark: Annotated[str, typer.Argument(help="Benchmark to score.")],
    activation_set: Annotated[str | None, typer.Option("--activation-set")] = None,
    text_field: Annotated[
        str | None, typer.Option("--text-field", help="Text probes: payload field to read.")
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
) -> None:
    """Score a benchmark with a frozen probe: no fitting, no recalibration."""
    fields = {"text_field": text_field} if text_field else {}
    _submit_probe(
        APPLY_PROBE_JOB,
        lambda: ApplyParams(probe, benchmark, activation_set, fields),
        wait,
        device,
        benchmark=benchmark,
    )


def probe_row(detector: Any) -> dict[str, Any]:
    """A probe or baseline detector as JSON: name, detector kind and its fit details."""
    return {"name": detector.name, "kind": detector.kind, "details": detector.details or {}}


def _probe_line(row: dict[str, Any]) -> str:
    d = row["details"]
    facts = [d.get("kind", ""), d.get("benchmark") or d.get("source_benchmark", "")]
    if isinstance(d.get("oof_auroc"), float):
        facts.append(f"out-of-fold AUROC {d['oof_auroc']:.3f}")
    if d.get("layer") is not None:
        facts.append(f"layer {d['layer']}, lambda {d.get('lambda')}")
    return f"{row['name']:<44} {row['kind']:<9} " + "  ".join(str(f) for f in facts if f)


@probe_app.command("list")
def list_command(as_json: JsonArrayOption = False) -> None:
    """Probes and baselines with what they were fitted on."""
    echo_rows(
        in_store(lambda s: [probe_row(d) for d in list_probes(s)]),
        as_json,
        _probe_line,
        empty="no probes yet (try: appellate probe fit BENCHMARK --judge NAME --wait)",
    )
