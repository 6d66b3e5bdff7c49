//===- KernelSignature.cpp - the table and the check of a kernel call -----===//

#include "runtime/kernels/KernelSignature.h"

#include <algorithm>
#include <map>

namespace dtcc::runtime {

#include "runtime/kernels/KernelSignatures.inc"

const KernelAttrSignature *
KernelSignature::findAttr(const std::string &attr) const {
  for (const KernelAttrSignature &a : attrs)
    if (a.name == attr)
      return &a;
  return nullptr;
}

const std::vector<KernelSignature> &kernelSignatures() {
  static const std::vector<KernelSignature> table = buildKernelSignatures();
  return table;
}

const KernelSignature *findKernelSignature(const std::string &kernel) {
  const std::vector<KernelSignature> &table = kernelSignatures();
  auto it = std::lower_bound(
      table.begin(), table.end(), kernel,
      [](const KernelSignature &s, const std::string &n) { return s.name < n; });
  return it != table.end() && it->name == kernel ? &*it : nullptr;
}

std::string dtypeListString(const std::vector<DType> &dtypes) {
  std::string out;
  for (size_t i = 0; i < dtypes.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") +
           dtypeName(dtypes[i]);
  return out;
}

namespace {

std::string typeString(const KernelOperandType &t) {
  std::string s = "tensor<";
  for (int64_t d : t.shape)
    s += std::to_string(d) + "x";
  return s + dtypeName(t.dtype) + ">";
}

const char *kindName(KernelAttrKind kind) {
  switch (kind) {
  case KernelAttrKind::kInt:
    return "an integer";
  case KernelAttrKind::kBool:
    return "a bool (0 or 1)";
  case KernelAttrKind::kFloat:
    return "a float";
  case KernelAttrKind::kString:
    return "a string";
  case KernelAttrKind::kInts:
    return "an integer array";
  case KernelAttrKind::kFloats:
    return "a float array";
  case KernelAttrKind::kStrings:
    return "a string list";
  }
  return "?";
}

const char *valueKindName(const Attrs::Value &v) {
  switch (v.index()) {
  case 0:
    return "an integer";
  case 1:
    return "a float";
  case 2:
    return "a string";
  case 3:
    return "an integer array";
  case 4:
    return "a float array";
  default:
    return "a string list";
  }
}

/// Whether `v` is of `kind` (see KernelAttrKind for what each accepts).
bool hasKind(const Attrs::Value &v, KernelAttrKind kind) {
  auto emptyArray = [&] {
    if (auto *i = std::get_if<std::vector<int64_t>>(&v))
      return i->empty();
    if (auto *f = std::get_if<std::vector<double>>(&v))
      return f->empty();
    return false;
  };
  switch (kind) {
  case KernelAttrKind::kInt:
    return std::holds_alternative<int64_t>(v);
  case KernelAttrKind::kBool: {
    auto *i = std::get_if<int64_t>(&v);
    return i && (*i == 0 || *i == 1);
  }
  case KernelAttrKind::kFloat:
    return std::holds_alternative<double>(v) ||
           std::holds_alternative<int64_t>(v);
  case KernelAttrKind::kString:
    return std::holds_alternative<std::string>(v);
  case KernelAttrKind::kInts:
    return std::holds_alternative<std::vector<int64_t>>(v) || emptyArray();
  case KernelAttrKind::kFloats:
    return std::holds_alternative<std::vector<double>>(v) || emptyArray();
  case KernelAttrKind::kStrings:
    return std::holds_alternative<std::vector<std::string>>(v) ||
           std::holds_alternative<std::string>(v);
  }
  return false;
}

std::string names(const std::vector<KernelTensorSignature> &list) {
  std::string out;
  for (const KernelTensorSignature &t : list)
    out += (out.empty() ? "" : ", ") + t.name +
           (t.optional ? "?" : t.variadic ? "..." : "");
  return out;
}

/// Binds `types` to the operands of `list`, checking count, element types
/// and ranks; `byName` collects each name's operands.
Status checkOperands(
    const char *what, const std::vector<KernelTensorSignature> &list,
    const std::vector<KernelOperandType> &types,
    std::map<std::string, std::vector<const KernelOperandType *>> &byName) {
  size_t fixed = 0;
  bool optional = false, variadic = false;
  for (const KernelTensorSignature &t : list) {
    optional |= t.optional;
    variadic |= t.variadic;
    fixed += !t.optional && !t.variadic;
  }
  const size_t n = types.size();
  if (n < fixed || (!variadic && n > fixed + (optional ? 1 : 0))) {
    std::string count = variadic   ? "at least " + std::to_string(fixed)
                        : optional ? std::to_string(fixed) + " or " +
                                         std::to_string(fixed + 1)
                                   : std::to_string(fixed);
    return invalidArgument("expected ", count, " ", what, "s (", names(list),
                           "), got ", n);
  }
  for (size_t i = 0; i < n; ++i) {
    const KernelTensorSignature &t = list[std::min(i, list.size() - 1)];
    const KernelOperandType &type = types[i];
    if (std::find(t.dtypes.begin(), t.dtypes.end(), type.dtype) ==
        t.dtypes.end())
      return invalidArgument(what, " ", i, " '", t.name,
                             "': expected element type ",
                             dtypeListString(t.dtypes), ", got ",
                             typeString(type));
    int64_t numel = 1;
    for (int64_t d : type.shape)
      numel *= d;
    if (t.scalar && numel != 1)
      return invalidArgument(what, " ", i, " '", t.name,
                             "': expected one element, got ",
                             typeString(type));
    if (t.rank >= 0 && int64_t(type.shape.size()) != t.rank)
      return invalidArgument(what, " ", i, " '", t.name, "': expected rank ",
                             t.rank, ", got ", typeString(type));
    byName[t.name].push_back(&type);
  }
  return Status::ok();
}

} // namespace

Status checkKernelCall(const KernelSignature &sig,
                       const std::vector<KernelOperandType> &inputs,
                       const std::vector<KernelOperandType> &outputs,
                       const Attrs &attrs) {
  std::map<std::string, std::vector<const KernelOperandType *>> byName;
  DTCC_RETURN_IF_ERROR(checkOperands("input", sig.inputs, inputs, byName));
  DTCC_RETURN_IF_ERROR(checkOperands("output", sig.outputs, outputs, byName));
  for (const KernelRelation &r : sig.relations) {
    const KernelOperandType *first = nullptr;
    std::string firstName;
    for (const std::string &name : r.operands)
      for (const KernelOperandType *t : byName[name]) {
        if (!first) {
          first = t;
          firstName = name;
          continue;
        }
        bool sameElement = t->dtype == first->dtype;
        bool sameShape = t->shape == first->shape;
        const char *what =
            r.kind == KernelRelationKind::kSameType ? "type"
            : r.kind == KernelRelationKind::kSameShape ? "shape"
                                                       : "element type";
        bool ok = r.kind == KernelRelationKind::kSameType
                      ? sameElement && sameShape
                  : r.kind == KernelRelationKind::kSameShape ? sameShape
                                                             : sameElement;
        if (!ok)
          return invalidArgument("expected '", name, "' to have the ", what,
                                 " of '", firstName, "' (", typeString(*first),
                                 "), got ", typeString(*t));
      }
  }
  for (const KernelAttrSignature &a : sig.attrs) {
    auto it = attrs.all().find(a.name);
    if (it == attrs.all().end()) {
      if (a.required)
        return invalidArgument("missing attribute '", a.name, "' (",
                               kindName(a.kind), ")");
      continue;
    }
    if (!hasKind(it->second, a.kind))
      return invalidArgument("attribute '", a.name, "': expected ",
                             kindName(a.kind), ", got ",
                             valueKindName(it->second));
    if (!a.values.empty()) {
      const std::string &v = std::get<std::string>(it->second);
      if (std::find(a.values.begin(), a.values.end(), v) == a.values.end()) {
        std::string allowed;
        for (const std::string &s : a.values)
          allowed += (allowed.empty() ? "\"" : ", \"") + s + "\"";
        return invalidArgument("attribute '", a.name, "': expected one of ",
                               allowed, ", got \"", v, "\"");
      }
    }
  }
  for (const auto &[name, value] : attrs.all()) {
    if (name.find('.') != std::string::npos || sig.findAttr(name))
      continue;
    std::string takes;
    for (const KernelAttrSignature &a : sig.attrs)
      takes += (takes.empty() ? "" : ", ") + a.name;
    return invalidArgument("unexpected attribute '", name, "' (",
                           takes.empty() ? std::string("the kernel takes none")
                                         : "the kernel takes " + takes,
                           ")");
  }
  return Status::ok();
}

Status checkKernelCall(const KernelContext &ctx) {
  const KernelSignature *sig = findKernelSignature(ctx.kernel);
  if (!sig)
    return ctx.error("no such kernel in the kernel-signature table "
                     "(runtime/kernels/Kernels.td)");
  auto typesOf = [](const std::vector<TensorView> &views) {
    std::vector<KernelOperandType> out;
    for (const TensorView &v : views)
      out.push_back({v.dtype, v.shape});
    return out;
  };
  Status s = checkKernelCall(*sig, typesOf(ctx.inputs), typesOf(ctx.outputs),
                             ctx.attrs);
  if (!s.isOk())
    return ctx.error(s.message());
  return Status::ok();
}

Attrs withKernelDefaults(const KernelSignature &sig, Attrs attrs) {
  for (const KernelAttrSignature &a : sig.attrs) {
    if (!a.hasDefault || attrs.has(a.name))
      continue;
    switch (a.kind) {
    case KernelAttrKind::kInt:
    case KernelAttrKind::kBool:
      attrs.set(a.name, a.intDefault);
      break;
    case KernelAttrKind::kFloat:
      attrs.set(a.name, a.floatDefault);
      break;
    case KernelAttrKind::kString:
      attrs.set(a.name, a.stringDefault);
      break;
    default:
      break;
    }
  }
  return attrs;
}

} // namespace dtcc::runtime
