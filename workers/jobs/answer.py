"""The ``answer_choices`` job: a local model answers choice items by option-letter probabilities.

Each item's question and lettered options are rendered with the model's chat template and the
reply is prefilled with ``Answer:``; one forward gives the next-token logits of the option
letters (softmax over the letters: a probability per option) and the residual stream at that
same position (the state before the answer letter). Per batch, activations go to a new shard
first and the predictions second, each idempotent, so a killed job resumes without duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.services.evidence.choices import option_letters
from app.services.jobs.answer import ANSWER_PREFIX, ChoiceParams, activation_set_name
from app.services.jobs.answer_results import ChoiceAnswer, ChoiceItem, plan_choices, write_answers
from workers.engines.activations import FillingSet, open_model_set
from workers.engines.capture import render_chat
from workers.engines.judge import judge_layers, last_position_forward, length_buckets
from workers.engines.label_tokens import single_token_ids
from workers.engines.models import LoadedModel
from workers.jobs.judge import load_registered
from workers.runner import JobContext, handles

POSITION_RULE = "before the answer letter (after the prefilled 'Answer:')"


def option_probabilities(logits: np.ndarray, n_options: Sequence[int]) -> list[np.ndarray]:
    """Softmax over each item's own option letters.

    Parameters
    ----------
    logits : ndarray of float, shape (b, K_max)
        Next-token logits of the letters A.. of the widest item.
    n_options : sequence of int, length b
        How many options each item has (its first ``k`` letters count).

    Returns
    -------
    list of ndarray of float64, shapes (k_i,)
        Probabilities summing to 1 per item.

    """
    out = []
    for row, k in zip(logits, n_options, strict=True):
        z = row[:k].astype(np.float64)
        e = np.exp(z - z.max())
        out.append(e / e.sum())
    return out


class _Answerer:
    """The model, its prompts, letter tokens and capture layers for one run."""

    def __init__(self, loaded: LoadedModel, params: ChoiceParams, k_max: int) -> None:
        self.loaded = loaded
        self.params = params
        self.layers = judge_layers(loaded.info.n_layers) if params.capture else None
        self._template_kwargs = loaded.info.template_kwargs
        letters = [" " + letter for letter in option_letters(k_max)]
        self.letter_ids = single_token_ids(loaded.tokenizer, ANSWER_PREFIX, letters)[1]

    def ids(self, item: ChoiceItem) -> list[int]:
        """Token ids of one item's chat, the reply prefilled up to the answer letter."""
        messages = [{"role": "user", "content": item.message}]
        return render_chat(
            self.loaded.tokenizer,
            messages,
            add_generation_prompt=True,
            prefill=ANSWER_PREFIX,
            **self._template_kwargs,
        )

    def answer(
        self, items: Sequence[ChoiceItem], prompts: Sequence[list[int]]
    ) -> tuple[list[ChoiceAnswer], np.ndarray | None]:
        """Answers of one batch and the states before the answer letter (``[b, L, d]``)."""
        tok = self.loaded.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        logits, states = last_position_forward(
            self.loaded.model,
            prompts,
            label_ids=self.letter_ids,
            layers=self.layers,
            pad_id=int(pad if pad is not None else 0),
        )
        answers = []
        for item, row, probs in zip(
            items, logits, option_probabilities(logits, [i.n_options for i in items]), strict=True
        ):
            letters = option_letters(item.n_options)
            answers.append(
                ChoiceAnswer(
                    item.instance_id,
                    letters[int(np.argmax(probs))],
                    {letter: float(p) for letter, p in zip(letters, probs, strict=True)},
                    {"letter_logits": [float(x) for x in row[: item.n_options]]},
                )
            )
        return answers, states


@handles(ChoiceParams)
def run_answer_choices(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``answer_choices`` jobs: see the module docstring."""
    params = ChoiceParams.from_dict(ctx.params)
    loaded, model_row = load_registered(ctx, params.model)
    details = {
        "backend": "local",
        "model": params.model,
        "fingerprint": loaded.info.fingerprint,
        "template": params.template,
        "answer_prefix": ANSWER_PREFIX,
    }
    plan = ctx.commit(lambda s: plan_choices(s, params, details))
    k_max = max([i.n_options for i in plan.pending], default=2)
    answerer = _Answerer(loaded, params, k_max)
    data_dir = ctx.store.settings.data_dir
    states: FillingSet | None = None
    if answerer.layers:
        states = ctx.commit(
            lambda s: open_model_set(
                s,
                data_dir,
                activation_set_name(params),
                benchmark_id=plan.benchmark_id,
                model=loaded.info,
                model_id=model_row["id"],
                layers=answerer.layers,
                position_rule=POSITION_RULE,
                details={"detector": params.detector, "template": params.template},
            )
        )
    done = plan.total - len(plan.pending)
    ctx.progress(done, plan.total)
    prompts = [answerer.ids(item) for item in plan.pending]
    for batch in length_buckets([len(p) for p in prompts], params.batch_size):
        ctx.check()
        items = [plan.pending[i] for i in batch]
        answers, values = answerer.answer(items, [prompts[i] for i in batch])
        if states is not None and values is not None:
            states.files.append([i.instance_id for i in items], values)
        done += len(items)

        def write(session: Session, answers: list[ChoiceAnswer] = answers) -> None:
            write_answers(session, plan, answers)
            if states is not None:
                states.sync(session)

        ctx.commit(write, done=done, total=plan.total)
    result: dict[str, Any] = {"detector": params.detector, "items": plan.total}
    if states is not None:
        result["activation_set"] = states.name
        result["layers"] = answerer.layers
    return result
