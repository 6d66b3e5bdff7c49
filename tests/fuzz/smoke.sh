#!/usr/bin/env bash
# The fuzz smoke run of `make test`: BIN_DIR CORPUS_DIR SECONDS. Runs every
# fuzz target SECONDS seconds on CORPUS_DIR/<target> (findings' reproducers
# and hand-made inputs) and the seeds the target writes at start-up, then on
# fresh mutations. Fails on a crash, a finding or a target that does not
# start; exits 77 (skipped) when the targets were not built because clang's
# libFuzzer runtime is missing (Debian libclang-rt-22-dev).
set -uo pipefail
BIN=$1
CORPUS=$2
SECONDS_EACH=$3
TARGETS="onnx onnxtext train program checkpoint data plan"
if [ ! -x "$BIN/dtcc-fuzz-onnx" ]; then
  echo "fuzz-smoke: skipped: no fuzz targets in $BIN (clang's libFuzzer" \
       "runtime, Debian libclang-rt-22-dev, was missing at configure time)"
  exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dtcc-fuzz-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failed=0
for t in $TARGETS; do
  mkdir -p "$WORK/$t/new" "$WORK/$t/seeds" "$WORK/$t/crashes"
  dirs=("$WORK/$t/new" "$WORK/$t/seeds")
  [ -d "$CORPUS/$t" ] && dirs+=("$CORPUS/$t")
  start=$(date +%s)
  DTCC_FUZZ_SEEDS="$WORK/$t/seeds" "$BIN/dtcc-fuzz-$t" "${dirs[@]}" \
    -max_total_time="$SECONDS_EACH" -timeout=60 -rss_limit_mb=4096 \
    -max_len=65536 -close_fd_mask=3 -print_final_stats=1 -error_exitcode=1 \
    -artifact_prefix="$WORK/$t/crashes/" >"$WORK/$t/log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t/log")
  cov=$(grep -o 'cov: [0-9]*' "$WORK/$t/log" | tail -1)
  echo "fuzz-smoke: $t: exit $rc, ${runs:-0} runs, ${cov:-cov: ?}," \
       "$(ls "$WORK/$t/seeds" 2>/dev/null | wc -l) seeds, $(( $(date +%s) - start )) s"
  if [ "$rc" -ne 0 ] || [ -z "$runs" ]; then
    failed=1
    echo "fuzz-smoke: $t FAILED; the end of its log:"
    grep -v '^#[0-9]' "$WORK/$t/log" | tail -40
    for f in "$WORK/$t/crashes/"*; do
      [ -f "$f" ] && echo "reproducer ($(wc -c <"$f") bytes, base64):" && base64 "$f" | head -40
    done
  fi
done
exit $failed
