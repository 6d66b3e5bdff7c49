#!/bin/bash
# Runs the CUDA backend's checks on a GPU machine from a kit that
# scripts/gpu_kit.sh packed where dtcc is built (no compiler needed here):
# the CUDA unit tests, tests/e2e/cuda_checks.py (training steps against the
# CPU backend), `dtcc calibrate --device cuda` and bench/train_gpt_gpu.py
# (beside PyTorch eager and torch.compile when PyTorch has CUDA).
# Usage: scripts/gpu_checks.sh KIT_DIR OUT_DIR [steps...]
#   steps: info unit cases vision conformance calibrate bench profile
#   (default: all, in order; vision runs the torchvision/timm cases of
#   DTCC_KIT_VISION when the kit has them)
# A lent GPU comes with minutes, not hours (15 of device time a session,
# the machine's start included): unit, cases and conformance check values,
# not speed, so they run side by side, each into its own file; calibrate,
# bench and profile time the GPU and run alone, after them. All of it took
# 5.5 minutes on an H200 (2026-11-29: 161 s side by side, the node tests the
# longest; 51 s of calibration; 100 s of benchmark, the 350M with five
# columns; 10 s of profiles; 2026-11-30: 174 s side by side, 164 s of
# benchmark for two models of two columns). DTCC_BENCH_MODELS (default
# 350m) and DTCC_BENCH_IMPLS choose the benchmark's rows and columns (give
# scripts/gpu_kit.sh the same to pack only their programs), DTCC_PROFILE_PROGRAMS
# (globs in KIT/bench, separated by spaces; default train_350m*.prog) the
# programs profiled.
# Writes OUT_DIR/log.txt (the summary and every timed step's output),
# unit.txt, cases.txt, vision.txt, conformance.txt (the side-by-side steps'
# own output)
# and calibration.json: at most 8 files, as a device call brings back.
set -uo pipefail
kit=$(cd "${1:?usage: gpu_checks.sh KIT_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_checks.sh KIT_DIR OUT_DIR}
shift 2
steps=${*:-info unit cases vision conformance calibrate bench profile}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
k=/tmp/dtcc-gpu-kit
rm -rf "$k" && mkdir -p "$k"
tar -C "$k" -xJf "$kit/kit.tar.xz" ||
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$kit/kit.tar.xz" "$k"
# CUDA's libraries from the toolkit or from the Python wheels (nvidia-*).
names="libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9"
found=$(find /usr /opt /lib /lib64 \( $(for n in $names; do printf -- '-name %s -o ' "$n"; done) -false \) \
  2>/dev/null)
cudalibs=$(for n in $names; do
  f=$(echo "$found" | grep "/$n\$" | head -1)
  [ -n "$f" ] && dirname "$f" || echo "gpu_checks: $n not found" >&2
done | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$k/lib:${cudalibs}${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=4
export DTCC_GPU_KERNEL_MODULES="$k/gpumod"
fails=0
section() { echo; echo "=== $* ($(date +%T))"; }
# The side-by-side steps: each writes OUT_DIR/NAME.txt and its exit status to
# a file that `settle` reads once they are all done.
# (`wait` for their pids alone: a bare `wait` would also wait for the tee
# that copies this script's output to log.txt, which never ends.)
pending=() pids=()
background() {
  local name=$1; shift
  section "$name: started, output in $out/$name.txt"
  ( "$@" > "$out/$name.txt" 2>&1; echo $? > "$out/.$name.rc" ) &
  pending+=("$name") pids+=($!)
}
settle() {
  [ ${#pending[@]} -gt 0 ] || return 0
  wait "${pids[@]}"
  for name in "${pending[@]}"; do
    rc=$(cat "$out/.$name.rc" 2>/dev/null || echo 1)
    rm -f "$out/.$name.rc"
    section "$name: exit $rc"
    tail -4 "$out/$name.txt"
    [ "$rc" = 0 ] || fails=$((fails + 1))
  done
  pending=() pids=()
}
unit_tests() {
  # Side by side (the tests check values, not speed), each binary's output
  # printed whole once all are done.
  local rc=0 t pids=()
  for t in "$k"/bin/Dtcc*Tests; do
    ( timeout 150 "$t" --gtest_brief=1 > "/tmp/unit-$(basename "$t").txt" 2>&1
      echo $? > "/tmp/unit-$(basename "$t").rc" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for t in "$k"/bin/Dtcc*Tests; do
    local b r
    b=$(basename "$t")
    r=$(cat "/tmp/unit-$b.rc")
    echo "--- $b exit $r"
    tail -60 "/tmp/unit-$b.txt"
    [ "$r" = 0 ] || rc=1
  done
  return $rc
}
vision() {
  rm -rf /tmp/dtcc-gpu-vision && mkdir -p /tmp/dtcc-gpu-vision &&
    tar -C /tmp/dtcc-gpu-vision -xJf "$kit/vision.tar.xz" &&
    timeout 300 python3 "$src/tests/e2e/cuda_checks.py" \
      --check /tmp/dtcc-gpu-vision/vision --runner-cuda "$k/bin/dtcc-runner-cuda"
}
conformance() {
  rm -rf /tmp/dtcc-gpu-conf && mkdir -p /tmp/dtcc-gpu-conf &&
    tar -C /tmp/dtcc-gpu-conf -xJf "$kit/conformance.tar.xz" &&
    timeout 300 python3 "$src/tests/conformance/run_onnx_node_tests.py" \
      --check /tmp/dtcc-gpu-conf/conformance --runner "$k/bin/dtcc-runner-cuda" --jobs 10
}

for step in $steps; do
  case $step in
  info)
    section info
    nvidia-smi || true
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$k/bin/dtcc-runner-cuda" | grep -E "not found|libcu|nccl|cudnn" ;;
  unit) background unit unit_tests ;;
  cases)
    background cases timeout 300 python3 "$src/tests/e2e/cuda_checks.py" \
      --check "$kit/cases" --runner-cuda "$k/bin/dtcc-runner-cuda" ;;
  vision)
    if [ -f "$kit/vision.tar.xz" ]; then background vision vision
    else section "vision: the kit has no vision.tar.xz (DTCC_KIT_VISION)"; fi ;;
  conformance) background conformance conformance ;;
  calibrate)
    settle
    section "dtcc calibrate --device cuda"
    timeout "${DTCC_CALIBRATE_TIMEOUT:-300}" "$k/bin/dtcc-calibrate-cuda" --no-collectives -o "$out/calibration.json" ||
      fails=$((fails + 1))
    python3 -c "
import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps(c, indent=1)[:6000])" \
      "$out/calibration.json" 2>&1 | head -150 ;;
  bench)
    settle
    section "MFU benchmark"
    PYTHONUNBUFFERED=1 timeout "${DTCC_BENCH_TIMEOUT:-500}" python3 "$src/bench/train_gpt_gpu.py" --programs "$kit/bench" \
      --runner-cuda "$k/bin/dtcc-runner-cuda" --models "${DTCC_BENCH_MODELS:-350m}" \
      --steps 8 --warmup 3 \
      --impls "${DTCC_BENCH_IMPLS:-dtcc,dtcc-no-fuse,dtcc-copies,dtcc-unfused-attn,eager,eager-sdpa,compile-sdpa}" ||
      fails=$((fails + 1)) ;;
  profile)
    settle
    section "where a step of the 350M GPT's time goes (--profile)"
    python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50304, 2_000_000).astype(np.uint16).tofile('/tmp/dtcc-gpu-tokens.bin')"
    for prog in $(for g in ${DTCC_PROFILE_PROGRAMS:-train_350m*.prog}; do echo "$kit"/bench/$g; done); do
      echo "--- $(basename "$prog")"
      timeout 120 "$k/bin/dtcc-runner-cuda" --program "$prog" \
        --data /tmp/dtcc-gpu-tokens.bin --steps 6 --log-every 1 --random-init 0 --profile 2>&1 |
        head -60 || fails=$((fails + 1))
    done ;;
  *) echo "unknown step '$step'"; fails=$((fails + 1)) ;;
  esac
done
settle
section "gpu_checks: $fails step(s) failed"
exit $((fails > 0))
