#!/usr/bin/env bash
# Runs the importer fuzzer: FUZZ_DIR SECONDS. The corpus starts from ONNX's
# node-test models and dtcc's .onnxtext tests; findings land in FUZZ_DIR/crashes.
set -euo pipefail
DIR=$1
SECONDS_TO_RUN=$2
CORPUS=$DIR/fuzz-corpus
mkdir -p "$CORPUS" "$DIR/crashes"
if [ -z "$(ls -A "$CORPUS")" ]; then
  for d in /usr/share/libonnx-testdata/data/node/*/; do
    cp "$d/model.onnx" "$CORPUS/$(basename "$d").onnx"
  done
  find tests/lit -name '*.test' -exec sh -c \
    'split-file "$1" "$2/$(basename "$1" .test)" 2>/dev/null || true' _ {} "$DIR/split" \;
  find "$DIR/split" -name '*.onnxtext' -exec cp {} "$CORPUS/" \; 2>/dev/null || true
fi
export PATH=/usr/lib/llvm-22/bin:$PATH
"$DIR/bin/dtcc-import-fuzzer" "$CORPUS" -max_total_time="$SECONDS_TO_RUN" \
  -artifact_prefix="$DIR/crashes/" -rss_limit_mb=4096 -max_len=65536 \
  -print_final_stats=1 2>&1 | tee "$DIR/fuzz.log" | grep -E "^#[0-9]+.*(pulse|DONE|NEW)|ERROR|stat::|==[0-9]+==" | tail -40
