"""Record two real SmolLM2 judge configurations on 60 JudgeBench pairs, as a test fixture.

The shared-folds test (``tests/metrics/test_judge_analysis.py``) needs two judges that really
judged the same pairs in both orders; 240 forced-choice forwards of SmolLM2-135M-Instruct on
long JudgeBench prompts cost minutes on a CPU, so they are run once here and their verdicts
(choice and verdict logits per order) written to ``tests/metrics/data/smollm2_two_judges.json``.
The two configurations are the same model with the default template in forced mode (the verdict
token's logits) and in calibrated mode (the same logits less a content-free prior, which takes
out much of a small model's slot preference). The pairs are the 60 shortest
GPT-4o pairs of JudgeBench (question and both responses, in characters), judged whole: the
forwards' cost grows with the prompt, and no prompt is ever cut.

Run from the repository root (minutes on 2 idle cores; ``--pairs N`` for fewer pairs)::

    .venv/bin/python benchmarks/record_smollm2_judges.py [--pairs 60]

It prints a JSON summary (pairs, flips per judge, seconds).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.language_models import register_language_model
from app.services.jobs.judge import JudgeParams
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Judgment
from workers.dispatch import HANDLERS
from workers.engines.models import convert_smollm2, describe_model
from workers.runner import Worker

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT / "data" / "judgebench" / "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
OUT = ROOT / "tests" / "metrics" / "data" / "smollm2_two_judges.json"
N_PAIRS = 60
CONFIGS: dict[str, dict[str, str]] = {
    "smollm2/forced": {"mode": "forced"},
    "smollm2/calibrated": {"mode": "calibrated"},
}


def main() -> None:
    """Judge, then write the fixture and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=N_PAIRS, help="Shortest pairs to judge.")
    n_pairs = parser.parse_args().pairs
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{data_dir / 'r.sqlite3'}")
        store = Store.open(settings)
        model_dir = convert_smollm2(data_dir)
        info = describe_model(model_dir)
        rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
        rows.sort(key=lambda r: len(r["question"]) + len(r["response_A"]) + len(r["response_B"]))
        shortest = data_dir / PAIRS.name
        shortest.write_text("".join(json.dumps(r) + "\n" for r in rows[:n_pairs]))
        with transaction(store.factory) as s:
            import_judgebench(s, [shortest], benchmark="jb")
            register_language_model(
                s, "smollm2", path=str(model_dir), fingerprint=info.fingerprint, dtype="float32"
            )
            for name, extra in CONFIGS.items():
                params = JudgeParams(
                    benchmark="jb", model="smollm2", judge=name,
                    capture=False, batch_size=4, **extra,
                )  # fmt: skip
                enqueue(s, params)
        Worker(store, HANDLERS, device="cpu", log=lambda _: None).run(once=True)
        with store.factory() as s:
            q = (
                select(Detector.name, Instance.external_id, Judgment.order, Judgment.choice)
                .add_columns(Judgment.verdict_logits)
                .join(Judgment, Judgment.detector_id == Detector.id)
                .join(Instance, Instance.id == Judgment.instance_id)
                .order_by(Detector.name, Instance.external_id, Judgment.order)
            )
            verdicts: dict[str, dict[str, dict[str, dict]]] = {}
            for judge, ext, order, choice, logits in s.execute(q):
                verdicts.setdefault(judge, {}).setdefault(ext, {})[order] = {
                    "choice": choice,
                    "verdict_logits": logits,
                }
        store.close()
    fixture = {
        "source": "benchmarks/record_smollm2_judges.py",
        "model": "SmolLM2-135M-Instruct (bundled GGUF, float32), default template",
        "pairs_file": PAIRS.name,
        "pairs": f"the {n_pairs} shortest (question and both responses, in characters)",
        "configurations": CONFIGS,
        "verdicts": verdicts,
    }
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    summary = {
        judge: {
            "pairs": len(by_pair),
            "flips": sum(
                p["AB"]["choice"] != p["BA"]["choice"] for p in by_pair.values() if len(p) == 2
            ),
        }
        for judge, by_pair in verdicts.items()
    }
    seconds = round(time.perf_counter() - start, 1)
    print(json.dumps({"pairs": n_pairs, "judges": summary, "seconds": seconds}))


if __name__ == "__main__":
    main()
