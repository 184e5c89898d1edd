"""Server-made inline SVG for the metrics page: ROC, precision-recall, reliability, histograms.

No JavaScript: each function takes the JSON-safe output of :mod:`app.stats.calibration` and
returns an ``<svg>`` element as :class:`markupsafe.Markup`. Every piece of text that comes from
data (detector names, labels) is escaped before it enters the markup; only the markup built
here is marked safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from app.services.metrics.metrics_plots import Curve, MetricsPlots

__all__ = [
    "PALETTE",
    "Series",
    "curve_plot",
    "histogram_plot",
    "layer_plot",
    "metrics_figures",
    "reliability_plot",
]

# Okabe-Ito: distinguishable under the common colour-vision deficiencies (black left out:
# it is the colour of the axes and the reference line).
PALETTE: tuple[str, ...] = (
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
    "#F0E442",
)

WIDTH, HEIGHT = 360, 300
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 14, 40
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Series:
    """One polyline: a name for the legend and its points in data coordinates [0, 1]^2."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]


def colour(index: int) -> str:
    """The palette colour of series ``index`` (cycling)."""
    return PALETTE[index % len(PALETTE)]


def _x(value: float) -> float:
    return LEFT + value * (WIDTH - LEFT - RIGHT)


def _y(value: float) -> float:
    return HEIGHT - BOTTOM - value * (HEIGHT - TOP - BOTTOM)


def _axes(
    x_label: str,
    y_label: str,
    y_max: float = 1.0,
    y_ticks: Sequence[float] = TICKS,
    x_ticks: Sequence[tuple[float, str]] | None = None,
) -> str:
    """Frame, ticks with labels, and axis titles (escaped); ``x_ticks`` are (position, label)."""
    parts = [
        f'<line class="axis" x1="{_x(0):.1f}" y1="{_y(0):.1f}" x2="{_x(1):.1f}" y2="{_y(0):.1f}"/>',
        f'<line class="axis" x1="{_x(0):.1f}" y1="{_y(0):.1f}" x2="{_x(0):.1f}" y2="{_y(1):.1f}"/>',
    ]
    for t, text in x_ticks if x_ticks is not None else [(t, f"{t:g}") for t in TICKS]:
        parts.append(
            f'<line class="tick" x1="{_x(t):.1f}" y1="{_y(0):.1f}" x2="{_x(t):.1f}" '
            f'y2="{_y(0) + 4:.1f}"/><text class="tick-label" x="{_x(t):.1f}" '
            f'y="{_y(0) + 15:.1f}" text-anchor="middle">{escape(text)}</text>'
        )
    for t in y_ticks:
        fy = t / y_max if y_max else 0.0
        label = f"{t:g}" if y_max == 1.0 else f"{round(t):d}"
        parts.append(
            f'<line class="tick" x1="{_x(0) - 4:.1f}" y1="{_y(fy):.1f}" x2="{_x(0):.1f}" '
            f'y2="{_y(fy):.1f}"/><text class="tick-label" x="{_x(0) - 6:.1f}" '
            f'y="{_y(fy) + 3:.1f}" text-anchor="end">{label}</text>'
        )
    parts.append(
        f'<text class="axis-label" x="{(_x(0) + _x(1)) / 2:.1f}" y="{HEIGHT - 6}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text class="axis-label" x="12" y="{(_y(0) + _y(1)) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(_y(0) + _y(1)) / 2:.1f})">{escape(y_label)}</text>'
    )
    return "".join(parts)


def _legend(names: Sequence[str], *, bottom: bool) -> str:
    """A legend box of colour swatches, placed in a corner that the curves rarely cover."""
    parts = []
    y0 = _y(0) - 8 - 14 * (len(names) - 1) if bottom else _y(1) + 8
    for i, name in enumerate(names):
        y = y0 + 14 * i
        parts.append(
            f'<g class="legend-item"><line x1="{_x(0.28):.1f}" y1="{y:.1f}" x2="{_x(0.34):.1f}" '
            f'y2="{y:.1f}" stroke="{colour(i)}" stroke-width="3"/>'
            f'<text class="legend-label" x="{_x(0.36):.1f}" y="{y + 3:.1f}">'
            f"{escape(_short(name))}</text></g>"
        )
    # A white box behind the entries keeps them readable where a curve passes underneath.
    box = (
        f'<rect class="legend-box" x="{_x(0.26):.1f}" y="{y0 - 8:.1f}" '
        f'width="{_x(1) - _x(0.26):.1f}" height="{14 * len(names) + 2}" fill="#fff" '
        'fill-opacity="0.85"/>'
    )
    return '<g class="legend">' + box + "".join(parts) + "</g>"


def _short(name: str, limit: int = 32) -> str:
    # Long detector names (org/model paths) would run off the plot; the tail is the model.
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]


def _svg(css_class: str, title: str, body: str) -> Markup:
    return Markup(
        f'<svg class="plot {escape(css_class)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{body}</svg>'
    )


def _points(xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{_x(x):.1f},{_y(y):.1f}" for x, y in zip(xs, ys, strict=True))


def curve_plot(
    css_class: str,
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    reference: tuple[tuple[float, float], tuple[float, float]] | None,
    legend_bottom: bool = True,
) -> Markup:
    """Curves in the unit square, one polyline per series, with a dashed reference line.

    Parameters
    ----------
    css_class : str
        Class of the ``<svg>`` (e.g. ``"roc"``, ``"pr"``); tests select ``svg.roc polyline``.
    title : str
        Accessible title.
    series : sequence of Series
        The curves, coloured by position in the Okabe-Ito palette.
    x_label, y_label : str
        Axis titles.
    reference : ((x0, y0), (x1, y1)) or None
        The chance line (the diagonal for ROC, the prevalence for PR).
    legend_bottom : bool
        Legend in the lower right (ROC) or upper right (PR).

    Returns
    -------
    Markup
        The ``<svg>`` element.

    """
    body = [_axes(x_label, y_label)]
    if reference is not None:
        (x0, y0), (x1, y1) = reference
        body.append(
            f'<line class="reference" x1="{_x(x0):.1f}" y1="{_y(y0):.1f}" '
            f'x2="{_x(x1):.1f}" y2="{_y(y1):.1f}"/>'
        )
    for i, s in enumerate(series):
        body.append(
            f'<polyline class="curve" fill="none" stroke="{colour(i)}" stroke-width="2" '
            f'points="{_points(s.xs, s.ys)}"><title>{escape(s.name)}</title></polyline>'
        )
    body.append(_legend([s.name for s in series], bottom=legend_bottom))
    return _svg(css_class, title, "".join(body))


def reliability_plot(title: str, series: Sequence[tuple[str, list[dict[str, object]]]]) -> Markup:
    """Reliability diagram: mean predicted vs observed rate per bin, one line per detector.

    Parameters
    ----------
    title : str
        Accessible title.
    series : sequence of (name, bins)
        ``bins`` as returned by :func:`app.stats.calibration.reliability_bins`; empty bins
        are skipped.

    Returns
    -------
    Markup

    """
    body = [_axes("mean predicted probability", "observed frequency")]
    body.append(
        f'<line class="reference" x1="{_x(0):.1f}" y1="{_y(0):.1f}" x2="{_x(1):.1f}" '
        f'y2="{_y(1):.1f}"/>'
    )
    for i, (name, bins) in enumerate(series):
        pts = [
            (float(b["mean_predicted"]), float(b["observed"]))  # type: ignore[arg-type]
            for b in bins
            if b["count"] and b["mean_predicted"] is not None and b["observed"] is not None
        ]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        dots = "".join(
            f'<circle cx="{_x(x):.1f}" cy="{_y(y):.1f}" r="2.5" fill="{colour(i)}"/>'
            for x, y in pts
        )
        body.append(
            f'<polyline class="curve" fill="none" stroke="{colour(i)}" stroke-width="1.5" '
            f'points="{_points(xs, ys)}"><title>{escape(name)}</title></polyline>{dots}'
        )
    body.append(_legend([name for name, _ in series], bottom=True))
    return _svg("reliability", title, "".join(body))


def histogram_plot(
    title: str, hist: dict[str, list[float] | list[int]], positive: str, negative: str
) -> Markup:
    """Score histograms of the two classes on shared bins, drawn as overlaid step bars.

    Parameters
    ----------
    title : str
        Accessible title (the detector name).
    hist : dict
        ``{"edges", "positive", "negative"}`` from
        :func:`app.stats.calibration.score_histograms`.
    positive, negative : str
        Class names for the legend.

    Returns
    -------
    Markup

    """
    edges = [float(e) for e in hist["edges"]]
    lo, hi = edges[0], edges[-1]
    span = (hi - lo) or 1.0
    counts = {"positive": list(hist["positive"]), "negative": list(hist["negative"])}
    top = max([1, *counts["positive"], *counts["negative"]])
    step = max(1, -(-int(top) // 4))
    y_ticks = [float(v) for v in range(0, int(top) + 1, step)]
    y_max = float(y_ticks[-1] if y_ticks[-1] >= top else y_ticks[-1] + step)
    body = [_axes("score", "items", y_max=y_max, y_ticks=y_ticks)]
    if (lo, hi) != (0.0, 1.0):
        # The axis ticks say 0..1; for scores outside [0, 1] state the real range.
        body.append(
            f'<text class="tick-label" x="{_x(1):.1f}" y="{_y(1) + 2:.1f}" text-anchor="end">'
            f"range {lo:.3g} to {hi:.3g}</text>"
        )
    for i, key in enumerate(("positive", "negative")):
        fill = PALETTE[3] if key == "positive" else PALETTE[0]
        for k, count in enumerate(counts[key]):
            if not count:
                continue
            x0 = (edges[k] - lo) / span
            x1 = (edges[k + 1] - lo) / span
            h = float(count) / y_max
            body.append(
                f'<rect class="bar {key}" x="{_x(x0):.1f}" y="{_y(h):.1f}" '
                f'width="{max(_x(x1) - _x(x0) - 0.5, 0.5):.1f}" height="{_y(0) - _y(h):.1f}" '
                f'fill="{fill}" fill-opacity="{0.75 if i == 0 else 0.55}">'
                f"<title>{escape(key)} {count}</title></rect>"
            )
    legend = []
    for i, (key, name) in enumerate((("positive", positive), ("negative", negative))):
        fill = PALETTE[3] if key == "positive" else PALETTE[0]
        y = _y(1) + 8 + 14 * i
        legend.append(
            f'<rect x="{_x(0.05):.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{fill}"/>'
            f'<text class="legend-label" x="{_x(0.05) + 14:.1f}" y="{y + 4:.1f}">'
            f"label {escape(name)}</text>"
        )
    body.append('<g class="legend">' + "".join(legend) + "</g>")
    return _svg("histogram", title, "".join(body))


def layer_plot(
    css_class: str,
    title: str,
    layers: Sequence[int],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    y_label: str,
    marked: int | None = None,
) -> Markup:
    """A value per layer (validation AUROC, inner-fold Brier) for each series, in [0, 1].

    Parameters
    ----------
    css_class, title
        Class and accessible title of the ``<svg>``.
    layers : sequence of int, shape (n_layers,)
        The x positions (HF ``hidden_states`` indices), spread evenly.
    series : sequence of (name, values)
        ``values[k]`` belongs to ``layers[k]``; None leaves a gap.
    y_label
        Axis title.
    marked
        A layer to mark with a vertical line (the chosen one).

    """
    span = max(len(layers) - 1, 1)
    position = {layer: k / span for k, layer in enumerate(layers)}
    step = max(1, len(layers) // 8)  # at most about eight labelled ticks
    ticks = [(position[x], str(x)) for x in layers[::step]]
    body = [_axes("layer", y_label, x_ticks=ticks)]
    if marked is not None and marked in position:
        x = _x(position[marked])
        body.append(
            f'<line class="reference" x1="{x:.1f}" y1="{_y(0):.1f}" x2="{x:.1f}" y2="{_y(1):.1f}"/>'
        )
    for i, (name, values) in enumerate(series):
        xs = [position[layer] for layer, v in zip(layers, values, strict=True) if v is not None]
        ys = [min(max(float(v), 0.0), 1.0) for v in values if v is not None]
        body.append(
            f'<polyline class="curve" fill="none" stroke="{colour(i)}" stroke-width="2" '
            f'points="{_points(xs, ys)}"><title>{escape(name)}</title></polyline>'
        )
    body.append(_legend([name for name, _ in series], bottom=True))
    return _svg(css_class, title, "".join(body))


def _curves_plot(
    kind: str,
    title: str,
    curves: list[Curve],
    axes: tuple[str, str],
    reference: tuple[tuple[float, float], tuple[float, float]] | None,
    **options: Any,
) -> Markup | None:
    """One plot of every detector's ``curves`` (``None`` when no detector has them)."""
    if not curves:
        return None
    x_label, y_label = axes
    return curve_plot(
        kind,
        title,
        [Series(c.detector, c.xs, c.ys) for c in curves],
        x_label=x_label,
        y_label=y_label,
        reference=reference,
        **options,
    )


def metrics_figures(plots: MetricsPlots) -> dict[str, Any]:
    """The four plots of the metrics page as SVG, with the two class names.

    ``roc``, ``pr`` and ``reliability`` are Markup (``None`` when no detector has that plot),
    ``histograms`` a list of (detector, Markup). Stored with the numbers as drawn
    (:mod:`app.services.metrics.metric_results`), so a page served from the store draws nothing.
    """
    base = plots.pr_baseline
    return {
        "roc": _curves_plot(
            "roc",
            "ROC curves",
            plots.roc,
            ("false positive rate", "true positive rate"),
            ((0.0, 0.0), (1.0, 1.0)),
        ),
        # A random ranking's precision is the prevalence at every recall.
        "pr": _curves_plot(
            "pr",
            "Precision-recall curves",
            plots.pr,
            ("recall", "precision"),
            ((0.0, base), (1.0, base)) if base is not None else None,
            legend_bottom=True,
        ),
        "reliability": reliability_plot("Reliability diagram", plots.reliability)
        if plots.reliability
        else None,
        "histograms": [
            (name, histogram_plot(name, counts, plots.positive, plots.negative))
            for name, counts in plots.histograms
        ],
        "positive": plots.positive,
        "negative": plots.negative,
    }
