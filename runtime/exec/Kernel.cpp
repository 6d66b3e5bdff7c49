//===- Kernel.cpp ---------------------------------------------------------===//

#include "runtime/exec/Kernel.h"

#include "runtime/kernels/KernelSignature.h"

namespace dtcc::runtime {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool TensorView::isContiguous() const {
  return strides == contiguousStrides(shape) || numel() <= 1;
}

std::string TensorView::typeString() const {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dtypeName(dtype) + ">";
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

TensorView makeView(void *data, DType dtype, std::vector<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.strides = contiguousStrides(shape);
  v.shape = std::move(shape);
  return v;
}

StatusOr<int64_t> Attrs::getInt(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return notFound("missing integer attribute '", name, "'");
  if (auto *v = std::get_if<int64_t>(&it->second))
    return *v;
  return invalidArgument("attribute '", name, "' is not an integer");
}

int64_t Attrs::getInt(const std::string &name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return fallback;
  if (auto *v = std::get_if<int64_t>(&it->second))
    return *v;
  return fallback;
}

StatusOr<double> Attrs::getFloat(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return notFound("missing float attribute '", name, "'");
  if (auto *v = std::get_if<double>(&it->second))
    return *v;
  if (auto *v = std::get_if<int64_t>(&it->second))
    return static_cast<double>(*v);
  return invalidArgument("attribute '", name, "' is not a float");
}

double Attrs::getFloat(const std::string &name, double fallback) const {
  auto v = getFloat(name);
  return v.isOk() ? v.value() : fallback;
}

StatusOr<std::string> Attrs::getString(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return notFound("missing string attribute '", name, "'");
  if (auto *v = std::get_if<std::string>(&it->second))
    return *v;
  return invalidArgument("attribute '", name, "' is not a string");
}

std::string Attrs::getString(const std::string &name,
                             const std::string &fallback) const {
  auto v = getString(name);
  return v.isOk() ? v.value() : fallback;
}

StatusOr<std::vector<int64_t>> Attrs::getInts(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return notFound("missing integer-array attribute '", name, "'");
  if (auto *v = std::get_if<std::vector<int64_t>>(&it->second))
    return *v;
  return invalidArgument("attribute '", name, "' is not an integer array");
}

void KernelRegistry::add(const std::string &name, KernelFactory factory) {
  // Every instruction meets the kernel-signature table before its factory.
  factories_[name] = [factory = std::move(factory)](
                         const KernelContext &ctx) -> StatusOr<KernelFn> {
    DTCC_RETURN_IF_ERROR(checkKernelCall(ctx));
    return factory(ctx);
  };
}

const KernelFactory *KernelRegistry::find(const std::string &name) const {
  auto it = factories_.find(name);
  return it == factories_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> out;
  for (auto &[name, _] : factories_)
    out.push_back(name);
  return out;
}

Status expectArity(const KernelContext &ctx, size_t inputs, size_t outputs) {
  if (ctx.inputs.size() != inputs || ctx.outputs.size() != outputs)
    return ctx.error("expected ", inputs, " inputs and ", outputs,
                     " outputs, got ", ctx.inputs.size(), " and ",
                     ctx.outputs.size());
  return Status::ok();
}

} // namespace dtcc::runtime
