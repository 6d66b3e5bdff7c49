#!/usr/bin/env bash
# The demo: dtcc's main job end to end.
#  Part 1: write a small GPT, make a token file from English text every
#          Debian system has, compile a training step and train on the CPU.
#  Part 2: the same training split over 4 ranks (data x tensor parallel,
#          ZeRO-1) with mpirun, equal to the single-device run.
#  Part 3: the planner: every plan of 4 ranks compiled and priced.
#  Part 4: compile a model exported from PyTorch and check its outputs.
set -euo pipefail
BUILD=${1:-build}
DTCC=$BUILD/bin/dtcc
OUT=$BUILD/demo
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== 1. a GPT from the zoo: 4 layers, width 128, byte vocabulary"
"$DTCC" zoo gpt --layers 4 --hidden 128 --heads 4 --vocab 256 --seq 64 \
  --batch 8 --seed 1 -o "$OUT/gpt.onnx"

echo
echo "== 2. training text: the license texts in /usr/share/common-licenses, as bytes"
cat /usr/share/common-licenses/* 2>/dev/null > "$OUT/text.txt" || true
/usr/bin/python3 -c "import numpy as np, sys; \
d = np.fromfile(sys.argv[1], dtype=np.uint8); d.astype(np.uint16).tofile(sys.argv[2]); \
print(f'{d.size:,} tokens')" "$OUT/text.txt" "$OUT/tokens.bin"

echo
echo "== 3. compile the training step: backward pass, AdamW, clipping, warmup + cosine"
"$DTCC" compile "$OUT/gpt.onnx" --train --optimizer adamw --lr 2e-3 \
  --weight-decay 0.1 --grad-clip 1.0 --warmup 30 --schedule cosine -o "$OUT/train"
ls -l "$OUT/train"

echo
echo "== 4. train 300 steps on the CPU (a checkpoint at the end)"
"$OUT/train" --data "$OUT/tokens.bin" --steps 300 --log-every 30 --save "$OUT/ckpt"

echo
echo "== 5. the same step on a 2 x 2 mesh: data parallel x Megatron tensor parallel, ZeRO-1"
"$DTCC" compile "$OUT/gpt.onnx" --train --optimizer adamw --lr 2e-3 \
  --weight-decay 0.1 --grad-clip 1.0 --warmup 30 --schedule cosine \
  --mesh dp=2,tp=2 --zero 1 -o "$OUT/train_mesh"
"$DTCC" explain "$OUT/train_mesh" | sed -n '1,12p'
echo "  ..."
"$DTCC" explain "$OUT/train_mesh" | sed -n '/^totals/,$p'
echo
echo "   20 steps on 4 ranks (mpirun, oversubscribed) and on one device:"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl=self,tcp OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
mpirun -np 4 "$OUT/train_mesh" --data "$OUT/tokens.bin" --steps 20 --log-every 5 \
  | tee "$OUT/mesh.log" | grep -E "^step|^rank"
"$OUT/train" --data "$OUT/tokens.bin" --steps 20 --log-every 5 > "$OUT/single.log"
paste <(grep "^step" "$OUT/single.log" | awk '{print $2, $4}') \
      <(grep "^step" "$OUT/mesh.log" | awk '{print $4}') |
  awk 'BEGIN {print "   step    1 device   dp=2 x tp=2"} {printf "   %-7s %-10s %s\n", $1, $2, $3}'

echo
echo "== 6. the planner: every plan of 4 CPU ranks compiled, each program priced"
"$DTCC" plan "$OUT/gpt.onnx" --cluster cpu-local --ranks 4 --alternatives 3 \
  > "$OUT/plan.txt"
sed -n '/^Chosen plan/p;/^Time per step/,/throughput/p;/^Best rejected/,/^Search:/p' \
  "$OUT/plan.txt"
sed -n '/^Largest tensors/,/^$/p' "$OUT/plan.txt" | head -6
echo "  (the whole report: $OUT/plan.txt)"

echo
echo "== 7. a model exported from PyTorch: compile, run, compare"
/usr/bin/python3 scripts/demo_model.py export "$OUT" 2>/dev/null
"$DTCC" import "$OUT/model.onnx" -o "$OUT/model.mlir"
echo "imported $(grep -c dgraph "$OUT/model.mlir") lines of dgraph; the first ops:"
grep -m 4 "dgraph\.[a-z_]* %" "$OUT/model.mlir"
"$DTCC" compile "$OUT/model.onnx" -o "$OUT/gpt_infer"
"$OUT/gpt_infer" --input ids="$OUT/ids.pb" --output-dir "$OUT/out" --print --stats
/usr/bin/python3 scripts/demo_model.py compare "$OUT"
