#!/bin/bash
# Packs what a GPU machine without dtcc's compiler needs to check the CUDA
# backend (scripts/gpu_checks.sh runs it there):
#   KIT/kit.tar.xz   the CUDA runner, calibration tool and CUDA unit tests
#                    (stripped) with the shared libraries they take from
#                    Debian (OpenBLAS, oneDNN, Open MPI, protobuf...), not the
#                    C/C++ runtime or CUDA's own (the GPU machine has those)
#   KIT/cases/       tests/e2e/cuda_checks.py --prepare: the GPU programs of
#                    its cases and their CPU reference losses
#   KIT/bench/       bench/train_gpt_gpu.py --prepare: the MFU benchmark's
#                    programs (DTCC_BENCH_MODELS and DTCC_BENCH_IMPLS, as
#                    gpu_checks.sh takes them, choose which: every variant
#                    of both GPTs is 9 MB)
#   KIT/conformance.tar.xz  tests/conformance/run_onnx_node_tests.py --target cuda
#                    --prepare: ONNX's node tests compiled for the GPU, with
#                    their inputs and expected outputs
#   KIT/vision.tar.xz  with DTCC_KIT_VISION=MODEL,...: bench/vision_models.py
#                    --cuda-kit, those torchvision/timm models (f32 and f64)
#                    as cases for gpu_checks.sh's vision step; a few MB of
#                    weights each, twice: a call carries at most 64 MiB in
#                    all (2026-11-29: 8 models of 0.1-1.5M parameters in f32
#                    were 40 MB, 31 MB compressed)
# Usage: scripts/gpu_kit.sh BUILD_DIR KIT_DIR
#   DTCC_KIT_CONFORMANCE=0 leaves the ONNX node tests out (a call with no
#   time for them: gpu_checks.sh's conformance step then has nothing to run)
#   DTCC_KIT_BINARIES=1 repacks kit.tar.xz alone and keeps KIT's programs:
#   after a change to the runtime, not to the compiler (2026-11-30: 2.5
#   minutes where the whole kit took 3.2; xz of the binaries is most of
#   both)
# A device call carries the kit with the working tree, at most 64 MiB in
# all: the script ends by saying whether this kit fits (2026-11-30: the kit
# with every benchmark program was 59 MB, the tree 8 MB: over).
set -euo pipefail
build=$(cd "${1:?usage: gpu_kit.sh BUILD_DIR KIT_DIR}" && pwd)
kit=${2:?usage: gpu_kit.sh BUILD_DIR KIT_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
bins="dtcc-runner-cuda dtcc-calibrate-cuda DtccCudaHostTests DtccCudaKernelTests
      DtccCudaConvTests DtccCudaNormPoolTests DtccCudaTensorOpTests
      DtccCudaGeneratedKernelTests DtccCudaCalibrateTests DtccGpuKernelModuleTests"
for b in $bins; do
  [ -x "$build/bin/$b" ] || { echo "error: $build/bin/$b is missing (build with the CUDA toolkit)" >&2; exit 1; }
done
if [ "${DTCC_KIT_BINARIES:-0}" = 1 ]; then
  [ -d "$kit/cases" ] || { echo "error: DTCC_KIT_BINARIES=1: $kit has no programs to keep" >&2; exit 1; }
  rm -f "$kit/kit.tar.xz"
else
  rm -rf "$kit" && mkdir -p "$kit"
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in $bins; do
  cp "$build/bin/$b" "$stage/bin/" && strip "$stage/bin/$b"
done
# Debian's libraries the binaries load; glibc, the C++ runtime and CUDA's
# libraries (cudart, cuBLAS, cuDNN, NCCL) come from the GPU machine.
for b in $bins; do ldd "$build/bin/$b"; done | awk '/=> \// {print $1, $3}' | sort -u |
  grep -Ev '^(libc|libm|libdl|libpthread|librt|libmvec|libstdc\+\+|libgcc_s)\.so|^libcu|^libnccl' |
  while read -r name path; do cp -L "$path" "$stage/lib/$name"; done
# The generated GPU kernel modules DtccCudaGeneratedKernelTests loads.
cp -r "$build/tests/unit/cuda/generated-kernels" "$stage/gpumod"
echo "kit: packing $(du -sh "$stage" | cut -f1) of binaries and libraries"
tar -C "$stage" -cf - bin lib gpumod | xz -6 --lzma2=preset=6,dict=256MiB -T1 > "$kit/kit.tar.xz"
if [ "${DTCC_KIT_BINARIES:-0}" != 1 ]; then
  /usr/bin/python3 "$src/tests/e2e/cuda_checks.py" --dtcc "$build/bin/dtcc" --prepare "$kit/cases" 2>&1 |
    grep -v Warning | grep -v '^  _C\.' || true
  [ -f "$kit/cases/manifest.json" ] || { echo "error: cuda_checks.py --prepare failed" >&2; exit 1; }
  find "$kit/cases" \( -name model.onnx -o -name cpu.dump \) -prune -exec rm -rf {} +
  bench_args=()
  [ -n "${DTCC_BENCH_MODELS:-}" ] && bench_args+=(--models "$DTCC_BENCH_MODELS")
  [ -n "${DTCC_BENCH_IMPLS:-}" ] && bench_args+=(--impls "$DTCC_BENCH_IMPLS")
  /usr/bin/python3 "$src/bench/train_gpt_gpu.py" --dtcc "$build/bin/dtcc" --prepare "$kit/bench" \
    "${bench_args[@]}"
  if [ "${DTCC_KIT_CONFORMANCE:-1}" != 0 ]; then
    /usr/bin/python3 "$src/tests/conformance/run_onnx_node_tests.py" --dtcc "$build/bin/dtcc" \
      --target cuda --prepare "$kit/conformance" --jobs 2 | tail -3
    tar -C "$kit" -cf - conformance | xz -6 -T2 > "$kit/conformance.tar.xz"
    rm -rf "$kit/conformance"
  fi
  if [ -n "${DTCC_KIT_VISION:-}" ]; then
    /usr/bin/python3 "$src/bench/vision_models.py" --dtcc "$build/bin/dtcc" \
      --models "$DTCC_KIT_VISION" --cuda-kit "$kit/vision" | grep -E "^(prepared|cuda kit)"
    tar -C "$kit" -cf - vision | xz -3 -T2 > "$kit/vision.tar.xz"
    rm -rf "$kit/vision"
  fi
fi
du -sh "$kit"
# What a device call would carry: the kit, the files git tracks or does
# not ignore, and shared/ where the checkout has one.
tree=$(cd "$src" && { git ls-files -z --cached --others --exclude-standard;
  if [ -d shared ]; then find shared -type f -print0; fi; } |
  xargs -0 -r du -cb 2>/dev/null | awk '$2 == "total" {s += $1} END {print s + 0}')
kitbytes=$(du -sb "$kit" | cut -f1)
total=$((tree + kitbytes))
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
  echo "warning: the kit ($kitbytes B) and the working tree ($tree B) are $total B, over a device call's 64 MiB: leave out programs (DTCC_BENCH_MODELS, DTCC_BENCH_IMPLS) or DTCC_KIT_CONFORMANCE=0" >&2
else
  echo "kit: $kitbytes B; with the working tree $total B of a device call's 64 MiB"
fi
