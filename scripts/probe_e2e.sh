#!/usr/bin/env bash
# End to end on the demo model (CPU is fine, about half an hour on two cores): SmolLM2 judges
# JudgeBench pairs in both orders, the flip probe and its baselines are fitted, a frozen copy is
# applied to MT-Bench pairs judged by the same model; truth probes trained on the statement sets
# score the role-play replies and the three confounder sets. Metrics land in $OUT as JSON.
#   APPELLATE_DATA_DIR=./appellate-e2e PAIRS=120 ./scripts/probe_e2e.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export APPELLATE_DATA_DIR="${APPELLATE_DATA_DIR:-./appellate-e2e}"
OUT="${OUT:-$APPELLATE_DATA_DIR/e2e}"
PAIRS="${PAIRS:-120}"
LAYERS="${LAYERS:-2,4,6,8,10,12,14,16,18,20,22,24,26,28}"
JUDGE=smollm2/calibrated
run() { echo "+ appellate $*" >&2; .venv/bin/appellate "$@"; }
mkdir -p "$OUT"

run demo --no-serve
run import mtbench --questions data/mt-bench/question.jsonl --answers data/mt-bench/model_answer \
    --models gpt-4,gpt-3.5-turbo --benchmark mtbench
run judge judgebench --model smollm2 --limit "$PAIRS" --repeat-subset 10 --verify 5 --wait > "$OUT/judge_judgebench.json"
run probe fit judgebench --judge "$JUDGE" --wait > "$OUT/fit_flip.json"
run judge mtbench --model smollm2 --wait > "$OUT/judge_mtbench.json"
run probe apply "probe:$JUDGE@judgebench" mtbench --wait > "$OUT/apply_mtbench.json"
run metrics judgebench --label "flip:$JUDGE" --json > "$OUT/metrics_flip_judgebench.json"
run metrics mtbench --label "flip:$JUDGE" --json > "$OUT/metrics_flip_mtbench.json"

run probe data build-truth --formats affirmative,negated --benchmark truth-statements
run probe data build-truth --formats forced_opposite --benchmark truth-forced-opposite
run probe data build-roleplay
run probe data build-confounders
run probe fit-lie truth-statements --model smollm2 --name truth-probe --variant truth --layers "$LAYERS" --wait > "$OUT/fit_truth.json"
run probe fit-lie truth-statements --model smollm2 --name lie-probe --variant lie --layers "$LAYERS" --wait > "$OUT/fit_lie.json"
run probe fit-lie truth-forced-opposite --model smollm2 --name forced-opposite-probe --variant forced-opposite --layers "$LAYERS" --wait > "$OUT/fit_forced_opposite.json"
for bench in roleplay confounder-likelihood confounder-persona-belief confounder-compliance; do
    run probe apply truth-probe "$bench" --text-field response --wait > "$OUT/apply_truth_$bench.json"
    run probe apply lie-probe "$bench" --wait > "$OUT/apply_lie_$bench.json"
    run probe apply forced-opposite-probe "$bench" --wait > "$OUT/apply_fo_$bench.json"
    run metrics "$bench" --label truth --json > "$OUT/metrics_truth_$bench.json"
done
echo "done: $OUT" >&2
