"""Time judging on SmolLM2 with in-generation capture vs without capture vs judging plus a replay.

Prints one JSON object. Every method judges the same AB prompts (real JudgeBench pairs) in the
same length-bucketed batches with greedy decoding: ``no_capture`` (generation only),
``in_generation_capture`` (the judge's hooks keep the pre-verdict states of the requested
layers at every step, as ``appellate judge`` does) and ``replay`` (generation without capture,
then one teacher-forced forward per batch over prompt + generated tokens to read the states
afterwards). Rows always generate ``--max-new-tokens`` tokens (no early stop), so every method
does identical decoding work. Forced-choice judging is timed with and without capture too.
Methods run interleaved, round after round; ratios are paired per round and reported as medians.

Reference: ``no_capture`` and ``replay``, in the same rounds on the same batches.

    python benchmarks/judge_bench.py [--pairs 8] [--batch-size 4] [--max-new-tokens 32]
                                     [--device cpu] [--dtype float32|bf16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rounds import run_rounds  # benchmarks/ is on sys.path when a script runs

from app.services.jobs.judge_protocol import JudgePrompt
from app.settings import Settings
from workers.engines.capture import render_chat
from workers.engines.judge import (
    JudgeSettings,
    generate_traced,
    judge_forced,
    judge_layers,
    last_position_forward,
    length_buckets,
    verdict_tokens,
)
from workers.engines.models import LoadedModel, convert_smollm2, load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).resolve().parent.parent / "data" / "judgebench"
TARGET_RATIO = 1.05
Method = Callable[[], Any]


def judge_prompts(loaded: LoadedModel, n: int) -> list[list[int]]:
    """AB prompts of the ``n`` shortest JudgeBench pairs, rendered with the chat template."""
    records = []
    for path in sorted(DATA.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            records.extend(json.loads(line) for line in fh if line.strip())
    records.sort(key=lambda r: len(r["question"]) + len(r["response_A"]) + len(r["response_B"]))
    judge = JudgePrompt()
    return [
        render_chat(
            loaded.tokenizer,
            judge.messages(r["question"], r["response_A"], r["response_B"], "AB"),
            add_generation_prompt=True,
        )
        for r in records[:n]
    ]


def _batches(prompts: list[list[int]], batch_size: int) -> list[list[list[int]]]:
    return [[prompts[i] for i in b] for b in length_buckets([len(p) for p in prompts], batch_size)]


def _generate(loaded: LoadedModel, batches: list[list[list[int]]], args: Any, layers: Any) -> list:
    return [
        generate_traced(
            loaded.model,
            loaded.tokenizer,
            batch,
            max_new_tokens=args.max_new_tokens,
            layers=layers,
            stop_at_verdict=False,
        )
        for batch in batches
    ]


def build_methods(
    loaded: LoadedModel, prompts: list[list[int]], args: argparse.Namespace
) -> dict[str, Method]:
    """The timed methods; each returns something whose equality across methods is checked."""
    layers = judge_layers(loaded.info.n_layers)
    batches = _batches(prompts, args.batch_size)
    labels = verdict_tokens(loaded.tokenizer).all_ids
    pad = int(loaded.tokenizer.pad_token_id or 0)

    def no_capture() -> list[list[int]]:
        return [g for t in _generate(loaded, batches, args, None) for g in t.generated]

    def in_generation_capture() -> list[list[int]]:
        return [g for t in _generate(loaded, batches, args, layers) for g in t.generated]

    def replay() -> list[list[int]]:
        traces = _generate(loaded, batches, args, None)
        for batch, trace in zip(batches, traces, strict=True):
            # The state before the last generated token: what a verdict replay would read.
            seqs = [[*p, *g[:-1]] for p, g in zip(batch, trace.generated, strict=True)]
            last_position_forward(loaded.model, seqs, label_ids=labels, layers=layers, pad_id=pad)
        return [g for t in traces for g in t.generated]

    def forced(capture: bool) -> Method:
        settings = JudgeSettings(mode="forced", layers=tuple(layers) if capture else None)

        def run() -> list[str | None]:
            return [
                o.slot
                for b in batches
                for o in judge_forced(loaded.model, loaded.tokenizer, b, settings)
            ]

        return run

    return {
        "no_capture": no_capture,
        "in_generation_capture": in_generation_capture,
        "replay": replay,
        "forced_no_capture": forced(False),
        "forced_with_capture": forced(True),
    }


def _paired(series: dict[str, list[float]], name: str, base: str) -> float:
    return round(
        statistics.median(a / b for a, b in zip(series[name], series[base], strict=True)), 4
    )


def main() -> None:
    """Parse options, run the methods round-robin and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model_dir or convert_smollm2(args.data_dir or Settings().data_dir)
    loaded = load_model(model_dir, device=args.device, dtype=args.dtype)
    prompts = judge_prompts(loaded, args.pairs)
    methods = build_methods(loaded, prompts, args)
    for run in methods.values():  # warm-up: page in weights, build kernels
        run()
    on_gpu = loaded.model.device.type == "cuda"
    wall, cpu, outputs = run_rounds(
        methods, args.rounds, torch.cuda.synchronize if on_gpu else lambda: None
    )
    on_cpu = loaded.model.device.type == "cpu"
    basis = cpu if on_cpu else wall
    generated = sum(len(g) for g in outputs["no_capture"])
    report: dict[str, Any] = {
        "reference": (
            "no_capture (generation only) and replay (generation, then a "
            "teacher-forced forward), same prompts and batches"
        ),
        "model": Path(loaded.info.path).name,  # the converted SmolLM2 unless --model-dir
        "model_layers": loaded.info.n_layers,
        "device": str(loaded.model.device),
        "dtype": str(loaded.model.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "pairs": len(prompts),
        "prompt_tokens": sum(len(p) for p in prompts),
        "generated_tokens": generated,
        "batch_size": args.batch_size,
        "layers": judge_layers(loaded.info.n_layers),
        "rounds": args.rounds,
        "ratio_basis": "cpu" if on_cpu else "wall",
        "methods": {
            name: {
                "median_wall_s": round(statistics.median(wall[name]), 4),
                "median_cpu_s": round(statistics.median(cpu[name]), 4),
                "wall_s": [round(t, 4) for t in wall[name]],
            }
            for name in methods
        },
        "same_generations": outputs["no_capture"]
        == outputs["in_generation_capture"]
        == outputs["replay"],
        "same_forced_verdicts": outputs["forced_no_capture"] == outputs["forced_with_capture"],
        "capture_overhead_ratio": _paired(basis, "in_generation_capture", "no_capture"),
        "replay_overhead_ratio": _paired(basis, "replay", "no_capture"),
        "forced_capture_overhead_ratio": _paired(basis, "forced_with_capture", "forced_no_capture"),
        "generated_tokens_per_s": {
            name: round(generated / statistics.median(wall[name]), 1)
            for name in ("no_capture", "in_generation_capture", "replay")
        },
        "target": f"in_generation_capture <= {TARGET_RATIO}x no_capture",
    }
    report["target_met"] = report["capture_overhead_ratio"] <= TARGET_RATIO
    print(json.dumps(report, indent=2, default=lambda x: np.asarray(x).tolist()))


if __name__ == "__main__":
    main()
