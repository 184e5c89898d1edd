"""The ``extract`` job: residual activations of every instance of a benchmark at one position rule.

Transcripts come from payload fields, either as plain text (a statement's last token, no chat
template) or as a chat (system, user, assistant turns rendered by the model's template). Batches
are written as shards as they finish, so a resumed job skips what is stored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.extract import ExtractParams
from app.tables import Instance
from workers.engines.activations import FillingSet, open_model_set
from workers.engines.capture import (
    BeforeMarker,
    EndOfTurn,
    LastToken,
    PositionRule,
    check_single_bos,
    iter_capture,
    render_chat,
)
from workers.engines.judge import judge_layers
from workers.engines.models import LoadedModel
from workers.jobs.judge import load_registered
from workers.runner import JobContext, handles


def position_rule(params: ExtractParams, loaded: LoadedModel) -> PositionRule:
    """The capture rule with token ids resolved for this model's tokenizer."""
    kind, _, arg = params.position.partition(":")
    if kind == "last":
        return LastToken()
    if kind == "before_marker":
        ids = loaded.tokenizer(arg, add_special_tokens=False)["input_ids"]
        return BeforeMarker(tuple(int(t) for t in ids))
    eos = loaded.tokenizer.eos_token_id
    if eos is None:
        raise InvalidInput("the tokenizer has no end-of-turn token", field="position")
    return EndOfTurn(int(eos))


def _field(payload: dict[str, Any], name: str, external_id: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str):
        raise InvalidInput(f"instance {external_id!r} has no text field {name!r}", field=name)
    return value


def transcript(
    params: ExtractParams, loaded: LoadedModel, payload: dict[str, Any], eid: str
) -> list[int]:
    """Token ids of one instance in the requested format."""
    tok = loaded.tokenizer
    if params.format == "text":
        ids = list(tok(_field(payload, params.text_field, eid))["input_ids"])
        check_single_bos(ids, tok.bos_token_id)
        return ids
    messages = []
    system = _field(payload, params.system_field, eid) if params.system_field else ""
    if system:  # empty = the model's default assistant prompt, not an empty system turn
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": _field(payload, params.user_field, eid)})
    messages.append({"role": "assistant", "content": _field(payload, params.assistant_field, eid)})
    return render_chat(tok, messages)


@handles(ExtractParams)
def run_extract_job(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``extract`` jobs: see the module docstring."""
    return capture_benchmark(ctx, ExtractParams.from_dict(ctx.params))


def capture_benchmark(ctx: JobContext, params: ExtractParams) -> dict[str, Any]:
    """Capture every instance of ``params.benchmark`` not yet stored; progress per batch.

    Also the first step of probe jobs that need activations of a benchmark they score.
    """
    loaded, model_row = load_registered(ctx, params.model)
    layers = params.layers or judge_layers(loaded.info.n_layers)
    rule = position_rule(params, loaded)

    def plan(session: Session) -> tuple[FillingSet, list[tuple[int, str, dict[str, Any]]]]:
        bench = get_benchmark(session, params.benchmark)
        states = open_model_set(
            session,
            ctx.store.settings.data_dir,
            params.name,
            benchmark_id=bench.id,
            model=loaded.info,
            model_id=model_row["id"],
            layers=layers,
            position_rule=rule.describe(),
            details={"format": params.format, "position": params.position},
        )
        q = select(Instance.id, Instance.external_id, Instance.payload).where(
            Instance.benchmark_id == bench.id
        )
        return states, list(session.execute(q.order_by(Instance.id).limit(params.limit)))

    states, rows = ctx.commit(plan)
    files = states.files
    stored = set(files.done_ids())
    pending = [(i, e, p) for i, e, p in rows if i not in stored]
    total, done = len(rows), len(rows) - len(pending)
    ctx.progress(done, total)
    transcripts = [transcript(params, loaded, p, e) for _, e, p in pending]
    pad = loaded.tokenizer.pad_token_id
    for items, values in iter_capture(
        loaded.model,
        transcripts,
        positions=rule,
        layers=layers,
        batch_size=params.batch_size,
        pad_token_id=pad,
    ):
        ctx.check()
        files.append([pending[int(i)][0] for i in items], values)
        done += len(items)
        ctx.commit(states.sync, done=done, total=total)
    return {
        "activation_set": states.name,
        "items": total,
        "layers": layers,
        "position_rule": rule.describe(),
    }
