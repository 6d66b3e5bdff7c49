//===- DeviceChoice.cpp - which GPU a rank drives -------------------------===//

#include "runtime/device/cuda/DeviceChoice.h"

namespace dtcc::runtime::cuda {

StatusOr<int> chooseCudaDevice(int visible, int localRank, int localRanks,
                               const char *visibleDevicesEnv) {
  const std::string mask =
      visibleDevicesEnv && *visibleDevicesEnv
          ? strCat(" (CUDA_VISIBLE_DEVICES=", visibleDevicesEnv, ")")
          : std::string(" (CUDA_VISIBLE_DEVICES unset)");
  auto devices = [](int n) {
    return strCat(n, " visible CUDA device", n == 1 ? "" : "s");
  };
  if (visible <= 0)
    return unavailable("no visible CUDA device", mask);
  if (localRank < 0)
    return invalidArgument("local rank ", localRank, " is negative");
  if (visible == 1)
    return 0;
  if (localRanks > 0 && visible < localRanks)
    return unavailable(
        "this process sees ", devices(visible), mask, " for ", localRanks,
        " ranks on this node: start one rank per GPU, with either every GPU "
        "visible to every rank (each takes the one of its local rank) or one "
        "GPU visible to each rank (e.g. srun --gpus-per-task=1)");
  if (localRank >= visible)
    return unavailable("local rank ", localRank, " has no GPU: this process "
                       "sees ", devices(visible), mask,
                       " (start at most ", visible, " ranks per node)");
  return localRank;
}

} // namespace dtcc::runtime::cuda
