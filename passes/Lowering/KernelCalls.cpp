//===- KernelCalls.cpp - kernel calls against the signature table ---------===//

#include "passes/Lowering/KernelCalls.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace dtcc::lowering {

runtime::DType kernelDType(Type type) {
  using runtime::DType;
  if (type.isF32())
    return DType::kF32;
  if (type.isF64())
    return DType::kF64;
  if (type.isF16())
    return DType::kF16;
  if (type.isBF16())
    return DType::kBF16;
  if (auto i = dyn_cast<IntegerType>(type)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1:
      return DType::kBool;
    case 8:
      return u ? DType::kU8 : DType::kI8;
    case 16:
      return u ? DType::kU16 : DType::kI16;
    case 32:
      return u ? DType::kU32 : DType::kI32;
    case 64:
      return u ? DType::kU64 : DType::kI64;
    default:
      break;
    }
  }
  return DType::kInvalid;
}

std::optional<runtime::Attrs::Value> kernelAttrValue(Attribute attr) {
  if (auto b = dyn_cast<BoolAttr>(attr))
    return int64_t(b.getValue());
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return int64_t(i.getValue().getSExtValue());
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.str();
  if (isa<UnitAttr>(attr))
    return int64_t(1);
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr))
    return std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end());
  if (auto a = dyn_cast<DenseF64ArrayAttr>(attr))
    return std::vector<double>(a.asArrayRef().begin(), a.asArrayRef().end());
  if (auto a = dyn_cast<DenseF32ArrayAttr>(attr))
    return std::vector<double>(a.asArrayRef().begin(), a.asArrayRef().end());
  if (auto a = dyn_cast<ArrayAttr>(attr)) {
    if (llvm::all_of(a, [](Attribute e) { return isa<IntegerAttr>(e); })) {
      std::vector<int64_t> v;
      for (Attribute e : a)
        v.push_back(cast<IntegerAttr>(e).getInt());
      return v;
    }
    if (llvm::all_of(a, [](Attribute e) { return isa<FloatAttr>(e); })) {
      std::vector<double> v;
      for (Attribute e : a)
        v.push_back(cast<FloatAttr>(e).getValueAsDouble());
      return v;
    }
  }
  return std::nullopt;
}

void addDialectAttrs(Operation *op, NamedAttrList &attrs) {
  for (NamedAttribute a : op->getAttrs())
    if (isDialectAttr(a))
      attrs.set(a.getName(), a.getValue());
}

FailureOr<DictionaryAttr> kernelAttrsOf(Operation *op,
                                        const runtime::KernelSignature &sig) {
  NamedAttrList attrs;
  // One dictionary of the op's attributes: an op with properties builds
  // one on every getAttrs().
  for (NamedAttribute a : op->getAttrs()) {
    if (isDialectAttr(a)) {
      attrs.set(a.getName(), a.getValue());
      continue;
    }
    StringRef name = a.getName().getValue();
    const runtime::KernelAttrSignature *target = nullptr;
    for (const runtime::KernelAttrSignature &k : sig.attrs)
      if ((k.from.empty() ? k.name : k.from) == name)
        target = &k;
    if (!target) {
      std::string takes;
      for (const runtime::KernelAttrSignature &k : sig.attrs)
        takes += (takes.empty() ? "" : ", ") +
                 (k.from.empty() ? k.name : k.from);
      return op->emitOpError("has attribute '")
             << name << "', which its kernel '" << sig.name
             << "' does not take (runtime/kernels/Kernels.td: "
             << (takes.empty() ? std::string("it takes none")
                               : "it takes " + takes)
             << ")";
    }
    attrs.set(target->name, a.getValue());
  }
  return attrs.getDictionary(op->getContext());
}

LogicalResult verifyKernelCall(Location loc, StringRef origin, StringRef kernel,
                               ArrayRef<RankedTensorType> ins,
                               ArrayRef<RankedTensorType> outs,
                               DictionaryAttr attrs) {
  const runtime::KernelSignature *sig =
      runtime::findKernelSignature(kernel.str());
  if (!sig)
    return emitError(loc) << "kernel '" << kernel << "' emitted for " << origin
                          << " is not in the kernel-signature table "
                             "(runtime/kernels/Kernels.td): no runtime "
                             "implements it";
  auto typesOf = [](ArrayRef<RankedTensorType> types) {
    std::vector<runtime::KernelOperandType> out;
    for (RankedTensorType t : types)
      out.push_back({kernelDType(t.getElementType()),
                     std::vector<int64_t>(t.getShape().begin(),
                                          t.getShape().end())});
    return out;
  };
  runtime::Attrs values;
  for (NamedAttribute a : attrs)
    if (std::optional<runtime::Attrs::Value> v = kernelAttrValue(a.getValue()))
      values.set(a.getName().str(), *v);
  runtime::Status s =
      runtime::checkKernelCall(*sig, typesOf(ins), typesOf(outs), values);
  if (!s.isOk())
    return emitError(loc) << "kernel '" << kernel << "' emitted for " << origin
                          << " does not match its signature: " << s.message();
  return success();
}

} // namespace dtcc::lowering
