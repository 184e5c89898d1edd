#!/usr/bin/env bash
# The outputs a restructuring must leave byte-identical: eight `appellate metrics/disagreements
# --json` on the demo data (JudgeBench: reference with 500 resamples, by source, the o1-mini flip
# labels, resolved labels; the threshold, cleanlab, consensus and judge-orders modes), then
# `rank-errors` and the label-errors list and `metrics --label defect` on MMLU-Redux.
#
#   APPELLATE_DATA_DIR=$(mktemp -d) appellate demo --no-serve
#   scripts/reference_outputs.sh OUTDIR     # same APPELLATE_DATA_DIR; prints sha256 of each file
#
# Run it once on a fresh demo store (rank-errors adds a job and ranker scores to the store).
set -euo pipefail
O=$1
mkdir -p "$O"
RM=reward_model/Skywork_Skywork-Reward-Gemma-2-27B
RM2=reward_model/internlm_internlm2-7b-reward
J=arena_hard/o1-mini-2024-09-12
appellate metrics judgebench --resamples 500 --json > "$O/m_ref.json"
appellate metrics judgebench --slice source --resamples 500 --json > "$O/m_slice.json"
appellate metrics judgebench --label "flip:$J" --resamples 500 --json > "$O/m_flip.json"
appellate metrics judgebench --labels resolved --resamples 500 --json > "$O/m_resolved.json"
appellate disagreements judgebench -d $RM --json > "$O/d_threshold.json"
appellate disagreements judgebench -d $RM --mode cleanlab --json > "$O/d_cleanlab.json"
appellate disagreements judgebench -d $RM -d $RM2 --mode consensus --json > "$O/d_consensus.json"
appellate disagreements judgebench -d $J --mode judge-orders --json > "$O/d_orders.json"
# The job's id, progress lines and timestamps vary from run to run; the rest must not.
appellate rank-errors mmlu-redux --wait 2>&1 | sed -E 's/job [0-9]+/job N/' \
    | grep -v -E '^\[|^running:' \
    | grep -v -E '"(created_at|started_at|finished_at|heartbeat_at|updated_at|claimed_at|lease_until)"' \
    > "$O/rank_errors.txt"
appellate disagreements mmlu-redux -d ranker:combined --mode label-errors --json \
    > "$O/d_label_errors.json"
appellate metrics mmlu-redux --label defect --resamples 500 --json > "$O/m_defect.json"
sha256sum "$O"/*
