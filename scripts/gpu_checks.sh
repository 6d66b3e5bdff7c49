#!/bin/bash
# Runs the CUDA backend's checks on a GPU machine from a kit that
# scripts/gpu_kit.sh packed where dtcc is built (no compiler needed here):
# the CUDA unit tests, tests/e2e/cuda_checks.py (training steps against the
# CPU backend), `dtcc calibrate --device cuda` and bench/train_gpt_gpu.py
# (beside PyTorch eager and torch.compile when PyTorch has CUDA).
# Usage: scripts/gpu_checks.sh KIT_DIR OUT_DIR [steps...]
#   steps: info unit cases conformance calibrate bench profile (default: all,
#   in order)
# Writes OUT_DIR/log.txt (everything), OUT_DIR/calibration.json.
set -uo pipefail
kit=$(cd "${1:?usage: gpu_checks.sh KIT_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_checks.sh KIT_DIR OUT_DIR}
shift 2
steps=${*:-info unit cases conformance calibrate bench profile}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
k=/tmp/dtcc-gpu-kit
rm -rf "$k" && mkdir -p "$k"
tar -C "$k" -xJf "$kit/kit.tar.xz" ||
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$kit/kit.tar.xz" "$k"
# CUDA's libraries from the toolkit or from the Python wheels (nvidia-*).
cudalibs=$(for n in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9; do
  f=$(find / -xdev -name "$n" -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$f" ] && dirname "$f" || echo "gpu_checks: $n not found" >&2
done | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$k/lib:${cudalibs}${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=4
export DTCC_GPU_KERNEL_MODULES="$k/gpumod"
fails=0
section() { echo; echo "=== $* ($(date +%T))"; }

for step in $steps; do
  case $step in
  info)
    section info
    nvidia-smi || true
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$k/bin/dtcc-runner-cuda" | grep -E "not found|libcu|nccl|cudnn" ;;
  unit)
    section "CUDA unit tests"
    for t in "$k"/bin/Dtcc*Tests; do
      echo "--- $(basename "$t")"
      timeout 120 "$t" --gtest_brief=1 2>&1 | tail -40
      rc=${PIPESTATUS[0]}
      echo "--- $(basename "$t") exit $rc"
      [ "$rc" = 0 ] || fails=$((fails + 1))
    done ;;
  cases)
    section "training steps against the CPU backend"
    timeout 300 python3 "$src/tests/e2e/cuda_checks.py" --check "$kit/cases" \
      --runner-cuda "$k/bin/dtcc-runner-cuda" || fails=$((fails + 1)) ;;
  conformance)
    section "ONNX node tests with --target cuda"
    rm -rf /tmp/dtcc-gpu-conf && mkdir -p /tmp/dtcc-gpu-conf &&
      tar -C /tmp/dtcc-gpu-conf -xJf "$kit/conformance.tar.xz"
    timeout 400 python3 "$src/tests/conformance/run_onnx_node_tests.py" --check /tmp/dtcc-gpu-conf/conformance \
      --runner "$k/bin/dtcc-runner-cuda" --jobs 16 || fails=$((fails + 1)) ;;
  calibrate)
    section "dtcc calibrate --device cuda"
    timeout 300 "$k/bin/dtcc-calibrate-cuda" --no-collectives -o "$out/calibration.json" ||
      fails=$((fails + 1))
    python3 -c "
import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps(c, indent=1)[:6000])" \
      "$out/calibration.json" 2>&1 | head -150 ;;
  bench)
    section "MFU benchmark"
    PYTHONUNBUFFERED=1 timeout 500 python3 "$src/bench/train_gpt_gpu.py" --programs "$kit/bench" \
      --runner-cuda "$k/bin/dtcc-runner-cuda" --steps 10 --warmup 3 --impls "${DTCC_BENCH_IMPLS:-dtcc,eager,compile,eager-sdpa,compile-sdpa}" || fails=$((fails + 1)) ;;
  profile)
    section "where a step of the 350M GPT's time goes (--profile)"
    python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50304, 2_000_000).astype(np.uint16).tofile('/tmp/dtcc-gpu-tokens.bin')"
    timeout 300 "$k/bin/dtcc-runner-cuda" --program "$kit/bench/train_350m.prog" \
      --data /tmp/dtcc-gpu-tokens.bin --steps 6 --log-every 1 --random-init 0 --profile 2>&1 |
      head -80 || fails=$((fails + 1)) ;;
  *) echo "unknown step '$step'"; fails=$((fails + 1)) ;;
  esac
done
section "gpu_checks: $fails step(s) failed"
exit $((fails > 0))
