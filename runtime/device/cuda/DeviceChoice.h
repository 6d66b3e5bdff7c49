//===- DeviceChoice.h - which GPU a rank drives ----------------*- C++ -*-===//
//
// One rank drives one GPU, chosen among the devices the process sees: the
// CUDA runtime numbers only those CUDA_VISIBLE_DEVICES leaves visible, and
// launchers differ in what they leave (mpirun and plain torchrun: every GPU
// of the node; `srun --gpus-per-task=1` and torchrun set-ups that mask per
// task: one). Pure, so the rule is tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CUDA_DEVICECHOICE_H
#define DTCC_RUNTIME_DEVICE_CUDA_DEVICECHOICE_H

#include "runtime/base/Status.h"

#include <string>

namespace dtcc::runtime::cuda {

/// The ordinal of the visible device that local rank `localRank` of
/// `localRanks` ranks on this node drives (`localRanks` 0: unknown):
///   - one visible device: that one (the launcher gave each rank its own,
///     or a single rank runs);
///   - at least as many visible devices as local ranks (or the count is
///     unknown and LOCAL_RANK names a visible device): device LOCAL_RANK;
///   - otherwise unavailable, naming both counts and `visibleDevicesEnv`
///     (CUDA_VISIBLE_DEVICES, null or empty when unset).
/// No visible device: unavailable as well.
StatusOr<int> chooseCudaDevice(int visible, int localRank, int localRanks,
                               const char *visibleDevicesEnv);

} // namespace dtcc::runtime::cuda

#endif // DTCC_RUNTIME_DEVICE_CUDA_DEVICECHOICE_H
