"""The ``build_dataset`` job: one lie-detector dataset builder, in one transaction."""

from __future__ import annotations

from typing import Any

from app.ingest.lie.builders import build_dataset
from app.services.jobs.build_dataset import BuildDatasetParams
from workers.runner import JobContext, handles


@handles(BuildDatasetParams)
def run_build_dataset(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``build_dataset`` jobs: one transaction, progress 0 then 1 of 1."""
    params = BuildDatasetParams.from_dict(ctx.params)
    ctx.progress(0, 1)
    lines = ctx.commit(lambda session: build_dataset(session, params), done=1, total=1)
    return {"summaries": lines}
