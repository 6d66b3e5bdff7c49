//===- ConvGeometry.cpp - checks of a convolution kernel's operands -------===//

#include "runtime/device/cpu/ConvGeometry.h"

#include "runtime/device/cpu/CpuKernelUtils.h"

namespace dtcc::runtime::cpu {

std::vector<int64_t> ConvGeometry::inputShape() const {
  std::vector<int64_t> s = {batch, inChannels};
  s.insert(s.end(), in.end() - spatial, in.end());
  return s;
}

std::vector<int64_t> ConvGeometry::filterShape() const {
  std::vector<int64_t> s = {outChannels, inPerGroup()};
  s.insert(s.end(), kernel.end() - spatial, kernel.end());
  return s;
}

std::vector<int64_t> ConvGeometry::outputShape() const {
  std::vector<int64_t> s = {batch, outChannels};
  s.insert(s.end(), out.end() - spatial, out.end());
  return s;
}

int64_t ConvGeometry::outputSize(int d, int64_t size) const {
  int64_t extent = (kernel[d] - 1) * dilation[d] + 1;
  return (size + padLow[d] + padHigh[d] - extent) / stride[d] + 1;
}

bool convKindOf(const std::string &kernel, ConvKind &kind) {
  if (kernel == "conv")
    kind = ConvKind::kForward;
  else if (kernel == "conv_input_grad")
    kind = ConvKind::kInputGrad;
  else if (kernel == "conv_filter_grad")
    kind = ConvKind::kFilterGrad;
  else
    return false;
  return true;
}

StatusOr<ConvGeometry> convGeometry(const KernelContext &ctx, ConvKind kind) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
  DTCC_RETURN_IF_ERROR(checkAllContiguous(ctx));
  return convGeometryOfShapes(ctx, kind);
}

StatusOr<ConvGeometry> convGeometryOfShapes(const KernelContext &ctx,
                                            ConvKind kind) {
  DTCC_RETURN_IF_ERROR(expectArity(ctx, 2, 1));
  const TensorView *input = nullptr, *filter = nullptr, *output = nullptr;
  const char *inputWhat = "", *filterWhat = "", *outputWhat = "";
  switch (kind) {
  case ConvKind::kForward:
    input = &ctx.inputs[0], filter = &ctx.inputs[1], output = &ctx.outputs[0];
    inputWhat = "input 0", filterWhat = "input 1 (filter)",
    outputWhat = "output 0";
    break;
  case ConvKind::kInputGrad:
    output = &ctx.inputs[0], filter = &ctx.inputs[1], input = &ctx.outputs[0];
    outputWhat = "input 0 (grad)", filterWhat = "input 1 (filter)",
    inputWhat = "output 0";
    break;
  case ConvKind::kFilterGrad:
    input = &ctx.inputs[0], output = &ctx.inputs[1], filter = &ctx.outputs[0];
    inputWhat = "input 0", outputWhat = "input 1 (grad)",
    filterWhat = "output 0";
    break;
  }
  const DType dtype = ctx.inputs[0].dtype;
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.inputs[1], dtype, "input 1"));
  DTCC_RETURN_IF_ERROR(checkDType(ctx, ctx.outputs[0], dtype, "output 0"));
  const int64_t rank = input->rank();
  if (rank < 3 || rank > 2 + ConvGeometry::kMaxSpatial)
    return ctx.error("expected ", inputWhat, " of rank 3, 4 or 5, got ",
                     input->typeString());
  if (filter->rank() != rank)
    return ctx.error("expected ", filterWhat, " of rank ", rank, ", got ",
                     filter->typeString());
  ConvGeometry g;
  g.spatial = int(rank - 2);
  const size_t spatial = size_t(g.spatial);
  DTCC_ASSIGN_OR_RETURN(auto strides, getIntsAttr(ctx, "strides", spatial));
  DTCC_ASSIGN_OR_RETURN(auto dilations, getIntsAttr(ctx, "dilations", spatial));
  DTCC_ASSIGN_OR_RETURN(auto low, getIntsAttr(ctx, "pad_low", spatial));
  DTCC_ASSIGN_OR_RETURN(auto high, getIntsAttr(ctx, "pad_high", spatial));
  DTCC_ASSIGN_OR_RETURN(g.groups, ctx.attrs.getInt("groups"));
  g.batch = input->shape[0];
  g.inChannels = input->shape[1];
  g.outChannels = filter->shape[0];
  if (g.groups < 1 || g.inChannels % g.groups != 0 ||
      g.outChannels % g.groups != 0)
    return ctx.error("expected groups (", g.groups,
                     ") >= 1 dividing the input channels (", g.inChannels,
                     ") and the output channels (", g.outChannels, ")");
  if (filter->shape[1] != g.inPerGroup())
    return ctx.error("expected ", filterWhat, " dimension 1 to be C / groups = ",
                     g.inPerGroup(), ", got ", filter->typeString());
  const int offset = ConvGeometry::kMaxSpatial - g.spatial;
  for (size_t d = 0; d < spatial; ++d) {
    const int i = offset + int(d);
    if (strides[d] < 1 || dilations[d] < 1 || low[d] < 0 || high[d] < 0)
      return ctx.error("expected strides and dilations >= 1 and pads >= 0, "
                       "got strides ", shapeString(strides), ", dilations ",
                       shapeString(dilations), ", pads ", shapeString(low),
                       " and ", shapeString(high));
    g.in[i] = input->shape[2 + d];
    g.kernel[i] = filter->shape[2 + d];
    g.stride[i] = strides[d];
    g.dilation[i] = dilations[d];
    g.padLow[i] = low[d];
    g.padHigh[i] = high[d];
    const int64_t extent = (g.kernel[i] - 1) * g.dilation[i] + 1;
    if (g.kernel[i] < 1 || g.in[i] + low[d] + high[d] < extent)
      return ctx.error("expected kernel size >= 1 and a padded input (",
                       g.in[i] + low[d] + high[d],
                       ") holding a dilated window (", extent,
                       ") in spatial dimension ", d);
    g.out[i] = g.outputSize(i, g.in[i]);
  }
  DTCC_RETURN_IF_ERROR(checkShape(ctx, *output, g.outputShape(), outputWhat));
  return g;
}

} // namespace dtcc::runtime::cpu
