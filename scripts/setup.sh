#!/usr/bin/env bash
# Installs the Debian packages dtcc needs to build and test, and nothing else.
# Idempotent: packages already present are not touched; a second run is instant.
set -euo pipefail

PACKAGES=(
  # Build tools.
  cmake ninja-build ccache clang-22 lld-22
  # Sanitizers and libFuzzer for clang-22 (make fuzz).
  libclang-rt-22-dev
  # MLIR/LLVM 22 (llvm-22-tools carries lit and FileCheck; llvm-22-dev the NVPTX
  # backend and libmlir-22-dev the gpu/NVVM passes of the GPU code generation,
  # whose ptxas and libdevice come from the CUDA toolkit, not from Debian).
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  # ONNX frontend and its protobuf.
  libonnx-dev protobuf-compiler libprotobuf-dev
  # CPU runtime: BLAS and MPI.
  libopenblas-dev libopenmpi-dev openmpi-bin
  # CPU convolutions: oneDNN (f32 forward and both gradients).
  libdnnl-dev
  # Tests: GoogleTest, ONNX node test data, the PyTorch/ONNX/NumPy peers
  # (torchvision: its roi_align is the detection heads' reference).
  libgtest-dev libonnx-testdata python3 python3-numpy python3-onnx python3-torch
  python3-torchvision
  # Planner: the CBC MILP solver.
  coinor-libcbc-dev
  # The compiler's allocator (faster than glibc's on MLIR's many small objects).
  libjemalloc-dev
  # Fault tests: network namespaces, veth, bridge and tc (scripts/netbed.sh).
  iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
