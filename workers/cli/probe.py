"""``appellate probe ...``: fit flip and lie-detector probes, apply frozen probes, list them.

Fitting and applying run as jobs (``--wait`` runs or follows them, as for ``appellate judge``);
``probe data ...`` builds the lie-detector datasets.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from app.cli.lie import lie_app
from app.cli.support import JsonArrayOption, echo_rows, in_store
from app.errors import InvalidInput
from app.services.evidence.lie_recipes import RECIPES
from app.services.evidence.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.evidence.probe_store import list_probes
from app.services.jobs.apply_probe import ApplyParams
from app.services.jobs.extract import ExtractParams
from app.services.jobs.fit_lie_probe import FitLieParams
from app.services.jobs.fit_probe import FitFlipParams
from app.services.jobs.fit_set_probe import FitSetParams
from app.services.jobs.probe_card import ProbeCardParams
from workers.cli.jobs import DeviceOption, WaitOption, parse_option, submit_options

probe_app = typer.Typer(no_args_is_help=True, help="Fit, apply and list probes.")
probe_app.add_typer(lie_app, name="data")


@probe_app.command("fit")
def fit(
    benchmark: Annotated[str, typer.Argument(help="Pairwise benchmark the judge judged.")],
    judge: Annotated[str, typer.Option("--judge", help="Judge detector (e.g. smollm2/forced).")],
    activation_set: Annotated[
        str | None, typer.Option("--activation-set", help="Default judge:JUDGE:BENCHMARK.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    shared: Annotated[
        list[str] | None,
        typer.Option(
            "--shared",
            help="Another judge whose shared analysis set and outer folds the fit uses "
            "(repeatable); refused when the probe is not estimable there.",
        ),
    ] = None,
    slice_field: Annotated[
        str | None, typer.Option("--slice", help="Payload field stratifying the shared folds.")
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    *,
    ctx: typer.Context,
) -> None:
    """Flip probe of a judge (nested grouped CV), its baselines, and a frozen copy for transfer."""
    submit_options(ctx, FitFlipParams, shared=list(shared or []))


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
    *,
    ctx: typer.Context,
) -> None:
    """Probe of any binary label set on an activation set (nested CV grouped by item group)."""
    submit_options(ctx, FitSetParams)


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
    *,
    ctx: typer.Context,
) -> None:
    """Lie-detector probe: layer = earliest with the best validation AUROC; frozen."""
    wanted = parse_option(ctx, ExtractParams, "layers", layers or "")
    try:
        spec = lie_extract_spec(variant, model, wanted)
    except InvalidInput as exc:
        raise typer.BadParameter(exc.reason, ctx=ctx, param_hint="--variant") from None
    submit_options(ctx, FitLieParams, extract=spec)


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
    *,
    ctx: typer.Context,
) -> None:
    """Score a benchmark with a frozen probe: no fitting, no recalibration."""
    fields = {"text_field": text_field} if text_field else {}
    submit_options(ctx, ApplyParams, fields=fields)


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


def _recipe_line(row: dict[str, Any]) -> str:
    parts = [row["estimator"], row["position"], row["layer_rule"], row["threshold"]]
    return f"{row['name']:<20} {' / '.join(parts):<60} {row['follows']}"


@probe_app.command("recipes")
def recipes_command(as_json: JsonArrayOption = False) -> None:
    """The probe recipes: training set, position, estimator, layer and threshold rules."""
    echo_rows([r.as_dict() for r in RECIPES.values()], as_json, _recipe_line)


def _ci(value: Any) -> str:
    return f"[{value[0]:.2f}, {value[1]:.2f}]" if value else "[-]"


def _num(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-"


def card_lines(card: dict[str, Any]) -> list[str]:
    """The report card as text: the fit, the sets' checks, one line per stress-test slice."""
    layer = card["fit"]["layer"]
    what = f"probe {card['probe']}" if card.get("probe") else f"recipe {card['recipe']}"
    lines = [
        f"{what} on {card['model']} (size {card['size']}): layer "
        f"{layer['layer']} ({layer['rule']}), {card['fit']['n']} training items; threshold "
        f"{card['control']['rule']} on {card['control']['n_control']} control replies, "
        f"realised FPR {card['control']['realised_fpr']:.3f}",
    ]
    for name, s in card["sets"].items():
        checks = "; ".join(
            f"{cond}: lie wins {v['lie_win_rate']:.2f} of {v['pairs']} (loglik honest "
            f"{v['honest_loglik']:.2f}, lie {v['lie_loglik']:.2f})"
            for cond, v in s["verification"].items()
        )
        rejected = ", ".join(f"{k}: {n}" for k, n in s["rejections"].items()) or "none"
        lines.append(f"  set {name}: {s['kept_pairs']} pairs kept of {s['considered']}; "
                     f"rejected {rejected}; {checks}")  # fmt: skip
    lines.append(f"  {'slice':<32} {'AUROC':>6} {'95% CI':<14} {'macro':>6} {'TPR':>6}  warnings")
    for row in card["rows"]:
        lines.append(
            f"  {row['slice']:<32} {_num(row.get('auroc')):>6} {_ci(row.get('auroc_ci')):<14} "
            f"{_num(row.get('macro_auroc')):>6} {_num(row.get('tpr')):>6}  "
            + "; ".join(row.get("warnings", []))
        )
    return lines


@probe_app.command("card")
def card_command(
    model: Annotated[str, typer.Option("--model", help="Registered model.")],
    recipe: Annotated[
        str, typer.Option("--recipe", help="A recipe (see probe recipes), fitted here.")
    ] = "",
    probe: Annotated[
        str,
        typer.Option(
            "--probe", help="Or a lie probe already fitted (probe fit-lie), read as fitted."
        ),
    ] = "",
    size: Annotated[
        int, typer.Option("--size", help="Training rows per source, stress questions, controls.")
    ] = 8,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="OpenAI-compatible server generating the persona set."),
    ] = None,
    remote_model: Annotated[
        str | None, typer.Option("--remote-model", help="The model name on that server.")
    ] = None,
    personas: Annotated[
        str, typer.Option("--personas", help="Comma-separated persona keys (default all 15).")
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the card as JSON.")] = False,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    *,
    ctx: typer.Context,
) -> None:
    """Fit a recipe (or take a fitted probe), build the five stress tests, print the report card."""

    def show(job: Any) -> None:
        card = job.result or {}
        typer.echo(json.dumps(card, indent=2) if as_json else "\n".join(card_lines(card)))

    chosen = [k.strip() for k in personas.split(",") if k.strip()]
    submit_options(ctx, ProbeCardParams, show, personas=chosen)
