#!/usr/bin/env bash
# The demo: export a small GPT from PyTorch to ONNX, compile it with dtcc,
# run the executable on the CPU, print its outputs and check them against
# PyTorch's.
set -euo pipefail
BUILD=${1:-build}
DTCC=$BUILD/bin/dtcc
OUT=$BUILD/demo
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== 1. export a 2-layer GPT (PyTorch -> ONNX, opset 17)"
/usr/bin/python3 scripts/demo_model.py export "$OUT" 2>/dev/null
ls -l "$OUT/model.onnx"

echo
echo "== 2. import: the first lines of the model in the dgraph dialect"
"$DTCC" import "$OUT/model.onnx" -o "$OUT/model.mlir"
head -12 "$OUT/model.mlir"
echo "  ... ($(grep -c dgraph "$OUT/model.mlir") lines of dgraph in $OUT/model.mlir)"

echo
echo "== 3. compile into one executable"
"$DTCC" compile "$OUT/model.onnx" -o "$OUT/gpt"
ls -l "$OUT/gpt"
"$OUT/gpt" --help > "$OUT/help.txt"
tail -6 "$OUT/help.txt"

echo
echo "== 4. run it on the CPU"
"$OUT/gpt" --input ids="$OUT/ids.pb" --output-dir "$OUT/out" --print --stats

echo
echo "== 5. compare with PyTorch"
/usr/bin/python3 scripts/demo_model.py compare "$OUT"
