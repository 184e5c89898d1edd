"""Inputs of probe fits read from the store: labelled items, activations, baseline features.

Read in one short transaction before any fitting; the arrays then live outside the session.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.activation_sets import get_activation_set
from app.services.evidence.flips import flip_label_name
from app.services.evidence.labelled_items import MISSING_SLICE, LabelledItems
from app.services.metrics.report import get_detector, load_labelled
from app.stats.probes import baseline_matrix
from app.stats.probes_groups import merge_groups_by_text
from app.tables import Instance, Judgment, Order
from workers.engines.activations import read_activation_set


@dataclass(frozen=True)
class ProbeData:
    """Labelled items with activations: ``x[i]`` is ``[n_layers, d]`` of ``instance_ids[i]``.

    ``groups`` are the stored groups joined wherever items share a normalised statement text
    (so no grouped split puts a duplicate statement on both sides); ``layers`` are the HF
    ``hidden_states`` indices of the layer axis; ``features`` is the
    ``[n, 6]`` baseline matrix (flip data only); ``fingerprint`` identifies the training data
    (activation set, model, items and labels).
    """

    benchmark: str
    label: str
    activation_set: str
    model_fingerprint: str
    layers: list[int]
    instance_ids: np.ndarray
    groups: np.ndarray
    y: np.ndarray
    x: np.ndarray
    features: np.ndarray | None
    fingerprint: str


def _fingerprint(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode())
    return "sha256:" + digest.hexdigest()


# The payload field holding an item's bare statement (statement sets and the truth chats).
STATEMENT_FIELD = "statement"


def statement_groups(items: LabelledItems) -> np.ndarray:
    """Each item's group, joined with every group holding the same normalised statement.

    ``items`` must be read with ``slice_field=STATEMENT_FIELD``; items without a statement
    keep their stored group.
    """
    if items.slices is None:
        raise ValueError(f"items were read without slice_field={STATEMENT_FIELD!r}")
    texts = [None if t == MISSING_SLICE else t for t in items.slices]
    return merge_groups_by_text(items.groups, texts)


def labelled_activations(
    session: Session, data_dir: Path, benchmark: str, label: str, activation_set: str
) -> ProbeData:
    """Items with a current binary ``label`` value and a row in ``activation_set``.

    Items with the same normalised ``statement`` share a group (see :class:`ProbeData`);
    items without one keep their stored group.

    Raises
    ------
    InvalidInput
        If fewer than two labelled items have activations, or only one class does.

    """
    items = load_labelled(session, benchmark, label, slice_field=STATEMENT_FIELD)
    merged = statement_groups(items)
    aset = get_activation_set(session, activation_set)
    arr = read_activation_set(data_dir, aset)
    row_of = {iid: row for row, iid in enumerate(arr.instance_ids)}
    keep = [k for k, iid in enumerate(items.instance_ids) if int(iid) in row_of]
    if len(keep) < 2:
        raise InvalidInput(
            f"only {len(keep)} items of {benchmark!r} have both {label!r} and activations in "
            f"{activation_set!r}",
            field="activation_set",
        )
    ids = items.instance_ids[keep]
    y = items.y[keep].astype(np.int8)
    if len(set(y.tolist())) < 2:
        raise InvalidInput(f"{label!r} has a single class on the items with activations")
    x = arr.values[[row_of[int(i)] for i in ids]]
    groups = merged[keep]
    return ProbeData(
        benchmark=benchmark,
        label=label,
        activation_set=activation_set,
        model_fingerprint=aset.model_fingerprint,
        layers=list(arr.layers),
        instance_ids=ids,
        groups=groups,
        y=y,
        x=np.asarray(x, dtype=np.float64),
        features=None,
        fingerprint=_fingerprint(aset.name, aset.model_fingerprint, ids.tolist(), y.tolist()),
    )


def flip_features(session: Session, judge: str, instance_ids: np.ndarray) -> np.ndarray:
    """The ``[n, 6]`` baseline features from each item's AB judgment and its two responses.

    Verbalised confidence, signed and absolute verdict-logit margin (logit A - logit B), signed
    and absolute response-length difference (characters of A minus B) and the AB choice (1 = A).

    Raises
    ------
    InvalidInput
        If an item has no AB judgment by ``judge`` or no verdict logits.

    """
    detector = get_detector(session, judge)
    q = (
        select(
            Judgment.instance_id,
            Judgment.confidence,
            Judgment.verdict_logits,
            Judgment.choice,
            Instance.payload,
        )
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(
            Judgment.detector_id == detector.id,
            Judgment.order == Order.AB.value,
            Judgment.instance_id.in_([int(i) for i in instance_ids]),
        )
    )
    rows = {r[0]: r for r in session.execute(q)}
    confidence, margin, length, choice = [], [], [], []
    for iid in instance_ids:
        row = rows.get(int(iid))
        if row is None or not row[2]:
            raise InvalidInput(
                f"instance {int(iid)} has no AB judgment with verdict logits by {judge!r}",
                field="judge",
            )
        _, conf, logits, chosen, payload = row
        confidence.append(np.nan if conf is None else float(conf))
        margin.append(float(logits["A"]) - float(logits["B"]))
        length.append(len(payload.get("response_a", "")) - len(payload.get("response_b", "")))
        choice.append(1.0 if chosen == "A" else 0.0)
    return baseline_matrix(
        np.asarray(confidence), np.asarray(margin), np.asarray(length, float), np.asarray(choice)
    )


def flip_data(
    session: Session,
    data_dir: Path,
    benchmark: str,
    judge: str,
    activation_set: str | None,
    instance_ids: np.ndarray | None = None,
) -> ProbeData:
    """A judge's retained pairs: flip labels, AB pre-verdict activations and baseline features.

    With ``instance_ids`` (an analysis set shared with other judges), exactly those pairs in
    that order, so indices into them are the shared folds' indices.

    Raises
    ------
    InvalidInput
        A pair of ``instance_ids`` without the judge's flip label or activations.

    """
    label = flip_label_name(judge)
    name = activation_set or f"judge:{judge}:{benchmark}"
    data = labelled_activations(session, data_dir, benchmark, label, name)
    if instance_ids is not None:
        row_of = {int(i): k for k, i in enumerate(data.instance_ids)}
        missing = [int(i) for i in instance_ids if int(i) not in row_of]
        if missing:
            raise InvalidInput(
                f"{len(missing)} pairs of the shared analysis set have no activations in "
                f"{name!r} (e.g. instance {missing[0]})",
                field="activation_set",
            )
        rows = [row_of[int(i)] for i in instance_ids]
        picked = {k: getattr(data, k)[rows] for k in ("instance_ids", "groups", "y", "x")}
        fingerprint = _fingerprint(data.fingerprint, picked["instance_ids"].tolist())
        data = ProbeData(**{**data.__dict__, **picked, "fingerprint": fingerprint})
    features = flip_features(session, judge, data.instance_ids)
    return ProbeData(**{**data.__dict__, "features": features})
