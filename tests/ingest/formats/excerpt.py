"""Copy the line excerpts of tests/ingest/formats from ../shared/data/formats (run once, by hand).

Lines are copied byte for byte; SOURCE.md in each folder lists them. Not a test module.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FASTCHAT = "fastchat/llm_judge/data/mt_bench/model_judgment"
ARENA = "data/arena-hard-v0.1/model_judgment"
R1 = "DeepSeek-R1-Distill-Llama-70B"
# (format, shared folder, judgment file under its model_judgment/, 1-based lines kept); the
# excerpt is <format>/model_judgment/<judgment file> here.
EXCERPTS = (
    ("mt_bench", f"stefanstud-phi3/{FASTCHAT}", "gpt-4_pair.jsonl", (7, 8, 10, 12, 74, 75)),
    ("mt_bench", f"stefanstud-phi3/{FASTCHAT}", "gpt-4_single.jsonl", (1, 61, 81, 141)),
    (
        "mt_bench",
        f"lesnikow-pythia-3arms/{FASTCHAT}",
        "gpt-4-turbo_pair.jsonl",
        (1, 4, 38, 53, 131, 278, 179, 196, 459),
    ),
    (
        "arena_hard",
        f"penfever-r1distill-judge/{ARENA}",
        f"{R1}/bagel-8b-v1.0.jsonl",
        (1, 2, 64, 117),
    ),
    ("arena_hard", f"penfever-r1distill-judge/{ARENA}", f"{R1}/gpt-4-0314.jsonl", (1, 117)),
    (
        "arena_hard",
        f"zeppombal-gpt35judge/{ARENA}",
        "gpt-3.5-turbo-0125/Nexusflow__Athene-V2-Chat.jsonl",
        (1, 2, 10, 12),
    ),
)


def main(shared: Path) -> None:
    """Write every excerpt from the shared formats folder ``shared``."""
    for fmt, folder, name, lines in EXCERPTS:
        text = (shared / fmt / folder / name).read_bytes().splitlines(keepends=True)
        out = HERE / fmt / "model_judgment" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"".join(text[n - 1] for n in lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[3] / "shared/data/formats")
