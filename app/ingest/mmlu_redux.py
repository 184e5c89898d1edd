"""MMLU-Redux subject CSVs (the paper's outputs or the published dataset's layout) as one benchmark.

Each row: a question, four options, the original label, models' answers and the experts' verdict.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.readers import open_table
from app.ingest.records import ImportSummary
from app.ingest.table import TableSpec, import_spec
from app.ingest.writer import DEFAULT_CHUNK_ROWS
from app.tables import BenchmarkKind

__all__ = ["DEFECT_LABEL", "ERRATA_LABEL", "import_mmlu_redux", "mmlu_redux_files"]

ERRATA_LABEL = "errata"
DEFECT_LABEL = "defect"
OK = "ok"
# The original label's column: the paper's outputs, else the published dataset's name for it.
_LABEL_COLUMNS = ("groundtruth_answer", "answer")
# Columns with a meaning of their own; every other column except the paper's aggregates is a
# model's answers. The dataset's source, correct_answer and potential_reason explain an
# annotation and are not imported.
_KNOWN = (
    "question",
    "choices",
    *_LABEL_COLUMNS,
    "error_type",
    "binary_error_type",
    "source",
    "correct_answer",
    "potential_reason",
)
_AGGREGATE = re.compile(
    r"^(majority_llm_pred|gt_majority_agreement|gt_ratio_agreement|entropy)_top_\d+$"
)
SOURCE = (
    "MMLU-Redux (Gema et al., 2024; github aryopg/mmlu-redux, outputs/multi_expert_helm): "
    "expert annotations of MMLU labels with HELM answers of frontier models"
)
LICENCE = "CC BY 4.0 (MMLU-Redux authors); MMLU by Hendrycks et al., MIT"


def mmlu_redux_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The subject CSVs named by ``paths``: files as given, folders as their ``*.csv``, sorted."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(path.glob("*.csv"))
            if not found:
                raise InvalidInput("no .csv files in this folder", file=os.fspath(path))
            out.extend(found)
        else:
            out.append(path)
    return out


def _defect(labels: dict[str, str]) -> dict[str, str]:
    """The binary defect label of an item with an expert annotation: 1 unless it says ok."""
    errata = labels.get(ERRATA_LABEL)
    return {} if errata is None else {DEFECT_LABEL: "0" if errata == OK else "1"}


def _columns(path: Path) -> tuple[str, list[str]]:
    """The file's label column and its model columns."""
    with open_table(path, required=("question", "choices")) as table:
        columns = table.columns or []
    label = next((c for c in _LABEL_COLUMNS if c in columns), None)
    if label is None:
        raise InvalidInput("missing column", file=str(path), line=1, field=_LABEL_COLUMNS[0])
    return label, [c for c in columns if c not in _KNOWN and not _AGGREGATE.match(c)]


def import_mmlu_redux(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    benchmark: str = "mmlu-redux",
    *,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import MMLU-Redux subject files into one ``choice`` benchmark.

    Per row: external id ``<subject>:<data row number>``, group and slice ``subject`` (the
    file stem), payload ``{question, options, subject}`` with ``choices`` parsed as a literal
    list (never evaluated); label sets ``reference`` (``groundtruth_answer``, or ``answer`` in
    the published dataset's layout, 0-3 as A-D; empty stays unlabelled), ``errata``
    (``error_type`` as written) and ``defect`` (1 when ``error_type`` is not ``ok``, else 0);
    every model column becomes a detector (kind ``model``) whose answers are predictions. The
    paper's aggregate columns (majority predictions, agreement ratios, entropies) are derived
    data and are not imported.

    Parameters
    ----------
    session
        The caller's session (one transaction for all files: bad input changes nothing).
    paths
        Subject CSV files or folders of them.
    benchmark
        Target benchmark name.
    chunk_size
        Rows per bulk write.

    Returns
    -------
    ImportSummary
        Counts summed over the files.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for a malformed cell (e.g. ``choices`` that is not a
        list literal, an answer that is no option letter).
    Conflict
        When a row contradicts what an earlier import stored.

    """
    total = ImportSummary()
    for path in mmlu_redux_files(paths):
        label, models = _columns(path)
        subject = path.stem
        spec = TableSpec(
            kind=BenchmarkKind.choice,
            mapping={"question": "question"},
            options="choices",
            labels={"reference": label, ERRATA_LABEL: "error_type"},
            answers={model: model for model in models},
            constants={"subject": subject},
            fixed_group=subject,
            derive=_defect,
        )
        summary = import_spec(
            session,
            path,
            spec,
            benchmark=benchmark,
            importer="mmlu-redux",
            description="Multiple-choice questions with expert annotations of their labels.",
            source=SOURCE,
            licence=LICENCE,
            chunk_size=chunk_size,
        )
        total.merge(summary)
    return total
