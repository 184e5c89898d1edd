"""Time residual capture on SmolLM2: ours vs the truncated-forward limit and common alternatives.

Prints one JSON object. Every method reads the same layers at the same position of the same
padded batches: ``ours`` (``workers.engines.capture.capture``, everything included: planning, hooks,
gather, copy to numpy), ``limit`` (embedding + causal mask + rotary + the blocks up to the
deepest needed one, nothing kept: no capture can be cheaper), ``naive`` (a full forward with
``output_hidden_states=True``, logits included), TransformerLens (``run_with_cache`` with a
names filter and ``stop_at_layer``) and nnsight (``trace`` with the rows indexed inside and
``tracer.stop()``), the last two when they import and load the local model offline. Methods run
interleaved, round after round, and medians are reported; the per-round ratio to the limit is
paired, which keeps it meaningful on a busy machine. torch's thread count is the worker's
(``workers.engines.capture.set_torch_threads``): ``--threads`` compares counts.

Reference: ``limit``, in the same rounds on the same batches.

    python benchmarks/capture_bench.py [--n-items 64] [--batch-size 8] [--device cpu]
                                       [--dtype float32|bf16] [--repeats 3] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rounds import run_rounds  # benchmarks/ is on sys.path when a script runs

from app.settings import Settings
from workers.engines.capture import (
    CaptureBatch,
    EndOfTurn,
    capture,
    decoder_blocks,
    plan_batches,
    render_chat,
    resolve_positions,
    set_torch_threads,
    usable_cores,
)
from workers.engines.models import LoadedModel, convert_smollm2, load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub
DATA = Path(__file__).resolve().parent.parent / "data" / "judgebench"
TARGET_RATIO = 1.05
Method = Callable[[], Any]


# --- inputs


def make_transcripts(
    tokenizer: Any, n: int, min_len: int, max_len: int, seed: int
) -> tuple[list[list[int]], int]:
    """Real chat transcripts (JudgeBench question + response) cut to seeded lengths.

    Each ends with ``<|im_end|>``, so the end-of-turn position is the last token and every
    method processes identical, untruncated batches. Returns (transcripts, end-of-turn id).
    """
    eot = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    rng = np.random.default_rng(seed)
    records = []
    for path in sorted(DATA.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            records.extend(json.loads(line) for line in fh if line.strip())
    out = []
    for i in range(n):
        rec = records[i % len(records)]
        chat = [
            {"role": "user", "content": rec["question"]},
            {"role": "assistant", "content": rec["response_A"] + "\n\n" + rec["response_B"]},
        ]
        ids = render_chat(tokenizer, chat)
        length = int(rng.integers(min_len, max_len + 1))
        out.append([*ids[: length - 1], eot])
    return out, eot


# --- methods


def _limit(model: Any, batches: list[CaptureBatch], deepest: int) -> Method:
    """Embedding, mask, rotary and the first ``deepest`` blocks; the least any capture must do."""
    from transformers.masking_utils import create_causal_mask

    base = model.base_model
    blocks = decoder_blocks(model)[:deepest]
    device = base.embed_tokens.weight.device

    def run() -> None:
        with torch.inference_mode():
            for b in batches:
                ids, pos = b.input_ids.to(device), b.position_ids.to(device)
                hidden = base.embed_tokens(ids)
                mask = create_causal_mask(
                    config=base.config,
                    inputs_embeds=hidden,
                    attention_mask=b.attention_mask.to(device),
                    cache=None,
                    position_ids=pos,
                )
                rotary = base.rotary_emb(hidden, position_ids=pos)
                for block in blocks:
                    hidden = block(
                        hidden, attention_mask=mask, position_embeddings=rotary, position_ids=pos
                    )
        _sync(device)

    return run


def _ours(model: Any, transcripts: list[list[int]], eot: int, layers: list[int], bs: int) -> Method:
    def run() -> np.ndarray:
        out = capture(model, transcripts, positions=EndOfTurn(eot), layers=layers, batch_size=bs)
        _sync(model.device)
        return out

    return run


def _gathering(
    n_items: int, layers: list[int], batches: list[CaptureBatch], one: Callable[..., Any]
) -> Method:
    """Run ``one(batch) -> [b, n_layers, d]`` per batch and put rows back in item order."""

    def run() -> np.ndarray:
        out: np.ndarray | None = None
        with torch.inference_mode():
            for b in batches:
                values = one(b).float().cpu().numpy()
                if out is None:
                    out = np.empty((n_items, *values.shape[1:]), dtype=np.float32)
                out[b.items] = values
        assert out is not None
        return out

    return run


def _naive(model: Any, n_items: int, layers: list[int], batches: list[CaptureBatch]) -> Method:
    device = model.device

    def one(b: CaptureBatch) -> torch.Tensor:
        hs = model(
            b.input_ids.to(device),
            attention_mask=b.attention_mask.to(device),
            position_ids=b.position_ids.to(device),
            output_hidden_states=True,
            use_cache=False,
        ).hidden_states
        rows, batch = b.rows.to(device), torch.arange(len(b.rows), device=device)
        return torch.stack([hs[k][batch, rows] for k in layers], dim=1)

    return _gathering(n_items, layers, batches, one)


def _transformer_lens(
    loaded: LoadedModel, n_items: int, layers: list[int], batches: list[CaptureBatch]
) -> Method:
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(
        loaded.info.path,
        hf_model=loaded.model,
        tokenizer=loaded.tokenizer,
        device=loaded.model.device,
    )
    names = [f"blocks.{k - 1}.hook_out" for k in layers]
    device = loaded.model.device

    def one(b: CaptureBatch) -> torch.Tensor:
        _, cache = bridge.run_with_cache(
            b.input_ids.to(device),
            attention_mask=b.attention_mask.to(device),
            names_filter=names,
            stop_at_layer=max(layers),
            return_cache_object=False,
        )
        rows, batch = b.rows.to(device), torch.arange(len(b.rows), device=device)
        return torch.stack([cache[n][batch, rows] for n in names], dim=1)

    return _gathering(n_items, layers, batches, one)


def _nnsight(
    loaded: LoadedModel, n_items: int, layers: list[int], batches: list[CaptureBatch]
) -> Method:
    from nnsight import LanguageModel

    wrapped = LanguageModel(loaded.model, tokenizer=loaded.tokenizer)
    device = loaded.model.device

    def one(b: CaptureBatch) -> torch.Tensor:
        rows, batch = b.rows.to(device), torch.arange(len(b.rows), device=device)
        inputs = {
            "input_ids": b.input_ids.to(device),
            "attention_mask": b.attention_mask.to(device),
            "position_ids": b.position_ids.to(device),
            "use_cache": False,
        }
        with wrapped.trace(inputs) as tracer:
            blocks = wrapped.model.layers
            kept = torch.stack([blocks[k - 1].output[batch, rows] for k in layers], 1).save()
            tracer.stop()
        return kept

    return _gathering(n_items, layers, batches, one)


# --- measuring


def _sync(device: Any) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _release_memory() -> None:
    gc.collect()
    if platform.system() == "Linux":
        # glibc keeps freed heap pages; without a trim the next method's baseline includes them.
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak_memory(run: Method, device: torch.device) -> int:
    """Peak memory above the baseline during a second call of ``run``: CUDA allocator or RSS.

    The first call is a warm-up: it pages in the memory-mapped safetensors weights and sets up
    thread pools, which would otherwise count as the first method's working memory.
    """
    run()
    _release_memory()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        return int(torch.cuda.max_memory_allocated(device) - base)
    base = peak = _rss_bytes()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join()
    return int(max(peak, _rss_bytes()) - base)


def build_methods(
    args: argparse.Namespace, model_dir: Path, transcripts: list[list[int]], eot: int
) -> tuple[dict[str, Method], dict[str, int], dict[str, str], LoadedModel]:
    """Timed methods, their peak memory on the longest batch, unavailable ones and the model.

    The memory runs double as warm-up and as proof that TransformerLens and nnsight work offline.
    """
    layers = args.layers
    loaded = load_model(model_dir, device=args.device, dtype=args.dtype)
    model, n = loaded.model, len(transcripts)
    where = resolve_positions(transcripts, EndOfTurn(eot))
    batches = plan_batches(transcripts, where, batch_size=args.batch_size)
    # Peak memory per item is a per-batch quantity: measure it on the longest batch alone.
    longest = [transcripts[i] for i in batches[0].items]
    first = plan_batches(longest, where[batches[0].items], batch_size=args.batch_size)
    device = model.device
    methods = {
        "ours": _ours(model, transcripts, eot, layers, args.batch_size),
        "limit": _limit(model, batches, max(layers)),
        "naive_output_hidden_states": _naive(model, n, layers, batches),
    }
    peaks = {
        "ours": peak_memory(_ours(model, longest, eot, layers, args.batch_size), device),
        "limit": peak_memory(_limit(model, first, max(layers)), device),
        "naive_output_hidden_states": peak_memory(
            _naive(model, len(longest), layers, first), device
        ),
    }
    unavailable: dict[str, str] = {}
    for name, factory in (("transformer_lens", _transformer_lens), ("nnsight", _nnsight)):
        try:
            # Each wrapper gets its own copy: TransformerLens switches its model to eager attention.
            own = load_model(model_dir, device=args.device, dtype=args.dtype)
            peaks[name] = peak_memory(factory(own, len(longest), layers, first), device)
            methods[name] = factory(own, n, layers, batches)
        except Exception as exc:  # any failure (import, offline load, API) means "unavailable"
            unavailable[name] = f"{type(exc).__name__}: {exc}"[:300]
    return methods, peaks, unavailable, loaded


def main() -> None:
    """Parse options, run every method round-robin and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-items", type=int, default=64)
    parser.add_argument("--min-tokens", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 15, 23, 29])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: as a worker sets them, APPELLATE_WORKER_THREADS or "
        "the usable cores)",
    )
    parser.add_argument(
        "--compare-threads",
        type=int,
        nargs="+",
        default=None,
        help="time only ours, at each of these thread counts in every round (paired under "
        "the same load); prints their medians instead of the method report",
    )
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    set_torch_threads(args.threads or Settings().worker_threads)

    from transformers import AutoTokenizer

    model_dir = args.model_dir or convert_smollm2(args.data_dir or Settings().data_dir)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    transcripts, eot = make_transcripts(
        tok, args.n_items, args.min_tokens, args.max_tokens, args.seed
    )
    methods, peaks, unavailable, loaded = build_methods(args, model_dir, transcripts, eot)

    device = loaded.model.device
    sync = (lambda: _sync(device)) if device.type == "cuda" else (lambda: None)
    if args.compare_threads:
        print(json.dumps(_compare_threads(args, methods["ours"], transcripts, sync), indent=2))
        return
    times, cpu, outputs = run_rounds(methods, args.repeats, sync)
    report = _report(args, loaded, transcripts, (times, cpu), outputs, peaks, unavailable)
    print(json.dumps(report, indent=2))


def _compare_threads(
    args: argparse.Namespace,
    ours: Callable[[], Any],
    transcripts: list[list[int]],
    sync: Callable[[], None],
) -> dict[str, Any]:
    """``ours`` at each thread count of ``--compare-threads``, interleaved round by round."""

    def at(threads: int) -> Callable[[], Any]:
        def run() -> Any:
            set_torch_threads(threads)
            return ours()

        return run

    counts = args.compare_threads
    times, cpu, _ = run_rounds({str(t): at(t) for t in counts}, args.repeats, sync)
    return {
        "usable_cores": usable_cores(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "n_items": len(transcripts),
        "tokens": sum(len(t) for t in transcripts),
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "threads": {
            str(t): {
                "median_wall_s": round(statistics.median(times[str(t)]), 4),
                "wall_s": [round(x, 4) for x in times[str(t)]],
                "median_cpu_s": round(statistics.median(cpu[str(t)]), 4),
            }
            for t in counts
        },
    }


def _report(
    args: argparse.Namespace,
    loaded: LoadedModel,
    transcripts: list[list[int]],
    timings: tuple[dict[str, list[float]], dict[str, list[float]]],
    outputs: dict[str, Any],
    peaks: dict[str, int],
    unavailable: dict[str, str],
) -> dict[str, Any]:
    times, cpu = timings
    n_tokens = sum(len(t) for t in transcripts)
    items_in_peak = min(args.batch_size, len(transcripts))
    report: dict[str, Any] = {
        "reference": (
            "limit: the truncated forward, nothing kept (no capture can be "
            "cheaper); naive, TransformerLens and nnsight beside it"
        ),
        "model": Path(loaded.info.path).name,  # the converted SmolLM2 unless --model-dir
        "model_layers": loaded.info.n_layers,
        "device": str(loaded.model.device),
        "dtype": str(loaded.model.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "usable_cores": usable_cores(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "n_items": len(transcripts),
        "tokens": n_tokens,
        "batch_size": args.batch_size,
        "layers": args.layers,
        "position_rule": "end_of_turn (<|im_end|>, the last token)",
        "repeats": args.repeats,
        "target": f"ours <= {TARGET_RATIO}x limit",
        "methods": {},
    }
    on_cpu = loaded.model.device.type == "cpu"
    for name in times:
        entry: dict[str, Any] = {
            "median_wall_s": round(statistics.median(times[name]), 4),
            "wall_s": [round(t, 4) for t in times[name]],
            "median_cpu_s": round(statistics.median(cpu[name]), 4),
            "tokens_per_s": round(n_tokens / statistics.median(times[name]), 1),
            "ratio_to_limit_wall": _ratio(times, name),
            "ratio_to_limit_cpu": _ratio(cpu, name),
            "peak_memory_per_item_mb": round(peaks[name] / items_in_peak / 2**20, 2),
        }
        if outputs.get(name) is not None and name != "ours":
            entry["max_abs_diff_vs_ours"] = float(np.abs(outputs[name] - outputs["ours"]).max())
        report["methods"][name] = entry
    for name, reason in unavailable.items():
        report["methods"][name] = {"available": False, "reason": reason}
    # On a shared CPU, process CPU time is what contention distorts least; on a GPU, wall time.
    key = "ratio_to_limit_cpu" if on_cpu else "ratio_to_limit_wall"
    report["target_basis"] = key
    report["target_met"] = report["methods"]["ours"][key] <= TARGET_RATIO
    return report


def _ratio(series: dict[str, list[float]], name: str) -> float:
    """Median over rounds of this method's time over the limit's time in the same round."""
    pairs = zip(series[name], series["limit"], strict=True)
    return round(statistics.median(t / lim for t, lim in pairs), 4)


if __name__ == "__main__":
    main()
