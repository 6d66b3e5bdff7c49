//===- CudnnConvPlan.cpp - a convolution as cuDNN's descriptors see it ---===//

#include "runtime/device/cuda/CudnnConvPlan.h"

#include <climits>

namespace dtcc::runtime::cuda {

int64_t CudnnConvPlan::inputElements() const {
  int64_t n = 1;
  for (int d : input)
    n *= d;
  return n;
}

StatusOr<CudnnConvPlan> planCudnnConv(const cpu::ConvGeometry &g) {
  CudnnConvPlan p;
  p.spatial = g.spatial < 2 ? 2 : g.spatial;
  p.groups = int(g.groups);
  // ConvGeometry pads missing leading spatial dimensions like size-1 ones:
  // the last `spatial` entries are cuDNN's dimensions.
  const int first = cpu::ConvGeometry::kMaxSpatial - p.spatial;
  for (int d = first; d < cpu::ConvGeometry::kMaxSpatial; ++d)
    p.explicitPad = p.explicitPad || g.padLow[d] != g.padHigh[d];
  auto fits = [](int64_t v) { return v >= 0 && v <= INT_MAX; };
  std::vector<int64_t> input = {g.batch, g.inChannels};
  std::vector<int64_t> filter = {g.outChannels, g.inPerGroup()};
  std::vector<int64_t> output = {g.batch, g.outChannels};
  for (int d = first; d < cpu::ConvGeometry::kMaxSpatial; ++d) {
    input.push_back(g.in[d] + (p.explicitPad ? g.padLow[d] + g.padHigh[d] : 0));
    filter.push_back(g.kernel[d]);
    output.push_back(g.out[d]);
    p.pad.push_back(p.explicitPad ? 0 : int(g.padLow[d]));
    p.stride.push_back(int(g.stride[d]));
    p.dilation.push_back(int(g.dilation[d]));
    if (p.explicitPad)
      p.padLow.push_back(g.padLow[d]);
  }
  if (p.explicitPad) {
    p.unpadded = {g.batch, g.inChannels};
    for (int d = first; d < cpu::ConvGeometry::kMaxSpatial; ++d)
      p.unpadded.push_back(g.in[d]);
  }
  for (const std::vector<int64_t> *dims : {&input, &filter, &output})
    for (int64_t v : *dims)
      if (!fits(v))
        return invalidArgument("convolution dimension ", v,
                               " exceeds cuDNN's int range");
  for (int d = first; d < cpu::ConvGeometry::kMaxSpatial; ++d)
    if (!fits(g.padLow[d]) || !fits(g.stride[d]) || !fits(g.dilation[d]))
      return invalidArgument("convolution window exceeds cuDNN's int range");
  p.input.assign(input.begin(), input.end());
  p.filter.assign(filter.begin(), filter.end());
  p.output.assign(output.begin(), output.end());
  return p;
}

} // namespace dtcc::runtime::cuda
