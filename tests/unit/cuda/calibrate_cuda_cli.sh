#!/bin/sh
# `dtcc calibrate --device cuda` where no GPU can be used (CUDA_VISIBLE_DEVICES
# hides every device, so this runs the same on machines with GPUs): --help
# works, a calibration says why it cannot run and exits 1, a bad --device is
# an error, and the CPU tool links no CUDA library.
# Usage: calibrate_cuda_cli.sh DTCC DTCC_CALIBRATE
set -u
dtcc=$1
cpu_tool=$2
failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

help=$(CUDA_VISIBLE_DEVICES=-1 "$dtcc" calibrate --device cuda --help) ||
  fail "--device cuda --help exited $?"
echo "$help" | grep -q "usage: dtcc calibrate --device cuda" ||
  fail "--device cuda --help: no usage line in: $help"
echo "$help" | grep -q "cuBLASLt" || fail "--device cuda --help: no cuBLASLt"

err=$(CUDA_VISIBLE_DEVICES=-1 "$dtcc" calibrate --device=cuda -o /dev/null 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "without a GPU: exit $rc, expected 1 ($err)"
echo "$err" | grep -q "error: no CUDA device: cudaGetDeviceCount returned" ||
  fail "without a GPU: unexpected message: $err"

err=$("$dtcc" calibrate --device tpu 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "--device tpu: exit $rc, expected 1"
echo "$err" | grep -q "expected cpu or cuda, got 'tpu'" ||
  fail "--device tpu: unexpected message: $err"

"$dtcc" calibrate --help | grep -q "dtcc calibrate --device cuda" ||
  fail "dtcc calibrate --help does not mention --device cuda"

if ldd "$cpu_tool" | grep -E "libcudart|libcublas|libnccl"; then
  fail "dtcc-calibrate links CUDA libraries"
fi

[ "$failed" -eq 0 ] && echo "PASS"
exit "$failed"
