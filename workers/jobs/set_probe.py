"""A probe fitted on any activation set against any binary label set of the same benchmark.

The generic case of the flip and lie probes: e.g. the residual stream a local model left at the
answer position of a multiple-choice benchmark (``appellate answer``) against ``defect``, the
expert errata. Nested grouped cross-validation (the benchmark's groups: the subject for
MMLU-Redux) picks the layer and the regularisation inside each outer fold; the out-of-fold
predictions are stored as the probe's scores, so the metric matrix shows the probe beside the
label-error rankers with the same intervals.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.probe_store import put_detector
from app.services.evidence.scores import replace_scores
from app.services.jobs.fit_set_probe import FitSetParams
from app.stats.probes import nested_cv
from workers.engines.probe_data import labelled_activations
from workers.jobs.probes import _cv_details, _oof_scores
from workers.runner import JobContext, handles


@handles(FitSetParams)
def run_fit_set_probe(ctx: JobContext) -> dict[str, Any]:
    """Fit by nested grouped CV and store the out-of-fold scores on the benchmark."""
    p = FitSetParams.from_dict(ctx.params)
    data_dir = ctx.store.settings.data_dir
    data = ctx.read(
        lambda s: labelled_activations(s, data_dir, p.benchmark, p.label, p.activation_set)
    )
    ctx.progress(0, 1)
    cv = nested_cv(
        data.x, data.y, data.groups, lambdas=tuple(p.lambdas), outer=p.outer, inner=p.inner,
        seed=p.seed,
    )  # fmt: skip
    details = _cv_details(data, cv, p.lambdas)

    def write(session: Session) -> None:
        bench = get_benchmark(session, p.benchmark)
        detector = put_detector(
            session, p.probe_name, "probe", {**details, "kind": "set"},
            f"probe of {p.label} on {p.activation_set}: out-of-fold predictions of nested "
            "grouped CV",
        )  # fmt: skip
        replace_scores(session, detector, bench, _oof_scores(data, cv, data.layers))

    ctx.commit(write, done=1, total=1)
    return {
        "probe": p.probe_name,
        "n": int(data.y.size),
        "positives": int(data.y.sum()),
        "groups": len(set(data.groups.tolist())),
        "oof_auroc": details["oof_auroc"],
    }
