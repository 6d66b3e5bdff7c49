#!/usr/bin/env bash
# Times `dtcc plan` (issue 5's targets on a 2-core machine): a 405B
# Llama-style model (the zoo's llama3-405b, written without weights) on
# 16,384 H100s, under 10 s; GPT-2 124M on 8 GPUs, under 1 s.
#
#   bench/plan_speed.sh [BUILD_DIR]     (default: build)
set -euo pipefail
BUILD_DIR=${1:-build}
DTCC=$BUILD_DIR/bin/dtcc
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$DTCC" zoo llama --preset llama3-405b --seq 8192 --no-weights \
  -o "$WORK/llama405b.onnx" >/dev/null
"$DTCC" zoo gpt --preset gpt2 --no-weights -o "$WORK/gpt2.onnx" >/dev/null

# Best of three wall-clock runs, in seconds.
time_it() {
  local best=""
  for _ in 1 2 3; do
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    best=$(echo "$start $end ${best:-1e9}" |
           awk '{t = $2 - $1; print (t < $3 ? t : $3)}')
  done
  echo "$best"
}

run() {
  local name=$1 limit=$2
  shift 2
  local seconds
  seconds=$(time_it "$DTCC" plan "$@")
  local plan
  plan=$("$DTCC" plan "$@" | sed -n 's/^Chosen plan: //p')
  printf '%-34s %8.3f s (target < %s s)  %s\n' "$name" "$seconds" "$limit" \
    "$plan"
  awk -v t="$seconds" -v l="$limit" 'BEGIN { exit !(t < l) }'
}

status=0
run "llama3-405b, 16384 x H100" 10 "$WORK/llama405b.onnx" \
  --cluster dgx-h100 --nodes 2048 --global-batch 2048 --search-budget 10s ||
  status=1
run "gpt2 124M, 8 x H100" 1 "$WORK/gpt2.onnx" \
  --cluster dgx-h100 --nodes 1 --global-batch 64 || status=1
exit $status
