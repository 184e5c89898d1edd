"""``margin`` mode: items a detector is unsure about, its score within a band around 0.5."""

from __future__ import annotations

from app.services.disagreements.modes import base


@base.register_mode
class MarginMode(base.DisagreementMode):
    """Items whose detector score ``p`` satisfies ``|p - 0.5| <= band``: the detector is unsure.

    The label is not compared, only shown: an unsure detector is worth a look either way.
    ``confidence`` is the detector's ``max(p, 1 - p)``; ranked by closeness to 0.5, then by
    external id.
    """

    name = "margin"
    title = "Margin"
    help = "The detector is unsure: its score lies within the band around 0.5; closest first."
    order = 60
    params = (
        base.Param(
            "band",
            base.ParamKind.NUMBER,
            "Band",
            "Half-width of the band around 0.5 where the detector counts as unsure.",
            default=0.1,
            low=0.0,
            high=0.5,
            low_open=True,
        ),
    )

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Scored items within the band, each ranked by its distance from 0.5."""
        detector, band = inp.detectors[0], inp.number("band")
        scores = inp.scores(detector)
        near = {iid: p for iid, p in scores.items() if abs(p - 0.5) <= band}
        info = inp.items_info(near)
        out = []
        for iid, p in near.items():
            ext, value = info[iid]
            reason = f"{detector} gives {p:.3f}, {abs(p - 0.5):.3f} from 0.5 (band {band:g})"
            out.append(
                base.Disagreement(iid, ext, value, p, max(p, 1.0 - p), reason, (abs(p - 0.5),))
            )
        return out
