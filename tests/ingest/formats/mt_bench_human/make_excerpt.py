"""Write human_judgments.jsonl here: hand-made rows in the schema of lmsys/mt_bench_human_judgments.

Run once, by hand (see NOTE.md). The winners and annotators are made up; the texts are real
MT-Bench answers: those FastChat's judge saw in the pair-judgment excerpts of ../mt_bench
(read back from its prompts) and those of data/mt-bench/model_answer. Not a test module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.ingest.judge_prompts import FASTCHAT_PAIR

HERE = Path(__file__).resolve().parent
JUDGMENTS = HERE.parent / "mt_bench" / "model_judgment"
MT_BENCH = HERE.parents[3] / "data" / "mt-bench"
SFT = (
    "no_train_shp_maj_data_dataset_sft_loss_pythia28_model_8_batch_size_2024-09-18_21-15-10_125466"
)
MAJ = "shp_maj_data_dataset_dpo_loss_pythia28_model_32_batch_size_2024-09-13_13-37-45_408534"
SC = "shp_sc_data_dataset_dpo_loss_pythia28_model_32_batch_size_2024-09-13_13-37-59_889195"
# (question, model_a, model_b, turn, [(annotator, winner), ...]): the order an annotator saw.
VOTES: list[tuple[int, str, str, int, list[tuple[str, str]]]] = [
    (87, "phi-3", "phi-3-dpo", 1, [("expert_0", "model_a"), ("expert_1", "model_a")]),
    (87, "phi-3-dpo", "phi-3", 1, [("author_2", "model_b")]),
    (88, "phi-3", "phi-3-dpo", 1, [("expert_0", "model_b"), ("expert_3", "tie")]),
    (90, "phi-3-dpo", "phi-3", 1, [("expert_1", "model_b"), ("expert_2", "model_b")]),
    (92, "phi-3", "phi-3-dpo", 1, [("expert_2", "tie (bothbad)"), ("author_0", "tie")]),
    (124, "phi-3", "phi-3-dpo", 1, [("expert_0", "model_b")]),
    (125, "phi-3", "phi-3-dpo", 1, [("expert_3", "model_a")]),
    (136, SFT, MAJ, 1, [("expert_4", "model_a")]),
    (136, MAJ, SFT, 1, [("expert_5", "tie")]),
    (136, SFT, MAJ, 2, [("expert_4", "model_b"), ("expert_5", "model_b")]),
    (136, SFT, SC, 1, [("expert_4", "model_a"), ("author_1", "model_a")]),
    (136, SFT, SC, 2, [("author_1", "tie")]),
    (136, MAJ, SC, 1, [("expert_5", "model_b"), ("author_1", "model_b")]),
    (136, SC, MAJ, 2, [("expert_5", "tie (bothbad)")]),
    (101, SFT, MAJ, 1, [("expert_4", "model_b")]),
    (101, SFT, MAJ, 2, [("expert_4", "model_b"), ("expert_5", "tie")]),
    (101, SC, SFT, 1, [("author_1", "model_a"), ("expert_5", "model_a")]),
    (81, "gpt-4", "claude-v1", 1, [("expert_0", "model_a"), ("expert_6", "model_a")]),
    (81, "claude-v1", "gpt-4", 2, [("expert_6", "model_b")]),
    (82, "gpt-3.5-turbo", "llama-13b", 1, [("author_0", "model_a"), ("expert_1", "tie")]),
]


def _from_judge_prompts() -> dict[tuple[int, str], tuple[list[str], list[str]]]:
    """``{(question, model): (user turns, answers)}`` read back from the judge's g1 prompts."""
    out: dict[tuple[int, str], tuple[list[str], list[str]]] = {}
    for name in ("gpt-4_pair.jsonl", "gpt-4-turbo_pair.jsonl"):
        for line in (JUDGMENTS / name).read_text().splitlines():
            row = json.loads(line)
            values = FASTCHAT_PAIR[row["judge"][1]].parse(row["g1_user_prompt"])
            assert values is not None
            if "question" in values:
                questions = [values["question"]]
                a, b = [values["answer_a"]], [values["answer_b"]]
            else:
                questions = [values["question_1"], values["question_2"]]
                a = [values["answer_a_1"], values["answer_a_2"]]
                b = [values["answer_b_1"], values["answer_b_2"]]
            for model, answers in ((row["model_1"], a), (row["model_2"], b)):
                known = out.get((row["question_id"], model))
                if known is None or len(known[1]) < len(answers):
                    out[(row["question_id"], model)] = (questions, answers)
    return out


def _from_answer_files() -> dict[tuple[int, str], tuple[list[str], list[str]]]:
    questions = {
        (q := json.loads(line))["question_id"]: q["turns"]
        for line in (MT_BENCH / "question.jsonl").read_text().splitlines()
    }
    out = {}
    for model in ("gpt-4", "claude-v1", "gpt-3.5-turbo", "llama-13b"):
        for line in (MT_BENCH / "model_answer" / f"{model}.jsonl").read_text().splitlines():
            answer = json.loads(line)
            qid = answer["question_id"]
            if qid in (81, 82):
                out[(qid, model)] = (questions[qid], answer["choices"][0]["turns"])
    return out


def _conversation(questions: list[str], answers: list[str]) -> list[dict[str, Any]]:
    messages = []
    for question, answer in zip(questions, answers, strict=False):
        messages += [{"content": question, "role": "user"}, {"content": answer, "role": "user"}]
        messages[-1]["role"] = "assistant"
    return messages


def main() -> None:
    texts = {**_from_judge_prompts(), **_from_answer_files()}
    rows = []
    for qid, model_a, model_b, turn, votes in VOTES:
        for judge, winner in votes:
            rows.append(
                {
                    "question_id": qid,
                    "model_a": model_a,
                    "model_b": model_b,
                    "winner": winner,
                    "judge": judge,
                    "conversation_a": _conversation(*texts[(qid, model_a)]),
                    "conversation_b": _conversation(*texts[(qid, model_b)]),
                    "turn": turn,
                }
            )
    with (HERE / "human_judgments.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
