//===- KernelSignature.h - the kernel-signature table -----------*- C++ -*-===//
//
// What every runtime kernel takes, generated from runtime/kernels/
// Kernels.td by dtcc-kernel-tblgen: the one contract that the lowering
// checks each kernel call it emits against, that both backends' registries
// check each instruction against before binding it, and whose defaults the
// planner's program model reads attributes with. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_KERNELS_KERNELSIGNATURE_H
#define DTCC_RUNTIME_KERNELS_KERNELSIGNATURE_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/exec/Kernel.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// How an attribute's value is stored in Attrs (and the program format).
enum class KernelAttrKind {
  kInt,     ///< int64_t
  kBool,    ///< int64_t, 0 or 1 (a unit attribute is 1 when present)
  kFloat,   ///< double (an integer is read as its value)
  kString,  ///< std::string, one of `values` when those are listed
  kInts,    ///< std::vector<int64_t>
  kFloats,  ///< std::vector<double>
  kStrings, ///< std::vector<std::string>, or one comma-separated string
};

struct KernelAttrSignature {
  std::string name;
  KernelAttrKind kind;
  bool required;
  bool hasDefault;
  int64_t intDefault;    ///< kInt, kBool
  double floatDefault;   ///< kFloat
  std::string stringDefault; ///< kString
  /// The values a kString attribute may take; empty: any.
  std::vector<std::string> values;
  /// The op attribute the lowering reads it from; empty: `name`.
  std::string from;
};

struct KernelTensorSignature {
  std::string name;
  std::vector<DType> dtypes;
  int rank; ///< -1: any
  bool optional;
  bool variadic;
  bool scalar; ///< one element, of any rank
  /// May be a view with the last dimension's stride 1 (Kernels.td's
  /// RowStrided).
  bool rowStrided;
};

enum class KernelRelationKind {
  kSameType,        ///< element type and shape
  kSameElementType,
  kSameShape,
};

struct KernelRelation {
  KernelRelationKind kind;
  std::vector<std::string> operands;
};

/// The devices that implement a kernel (KernelSignature::backends).
enum KernelBackend : unsigned { kCpuBackend = 1, kCudaBackend = 2 };

struct KernelSignature {
  std::string name;
  std::string summary;
  /// The op the lowering emits it for ("dgraph.matmul"); empty for the
  /// lowering's own kernels (copy) and kernels no op emits.
  std::string source;
  unsigned backends = 0; ///< KernelBackend bits
  std::vector<KernelTensorSignature> inputs, outputs;
  std::vector<KernelAttrSignature> attrs;
  std::vector<KernelRelation> relations;

  const KernelAttrSignature *findAttr(const std::string &attr) const;
};

/// Every kernel, sorted by name.
const std::vector<KernelSignature> &kernelSignatures();
/// The signature of `kernel`; null when the table has none.
const KernelSignature *findKernelSignature(const std::string &kernel);

/// The element type and shape of one operand of a call.
struct KernelOperandType {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
};

/// Checks a call of `sig`: operand counts, element types, ranks, the
/// relations, and the attributes (every required one present, each of
/// its kind and among its values; no attribute the kernel does not take,
/// except names with a '.', which belong to a dialect and are not the
/// kernel's). The error says what was expected and what was found,
/// without the kernel's name (the caller adds it and where).
Status checkKernelCall(const KernelSignature &sig,
                       const std::vector<KernelOperandType> &inputs,
                       const std::vector<KernelOperandType> &outputs,
                       const Attrs &attrs);
/// checkKernelCall on a bound kernel's views; the error names the kernel
/// and the instruction's node (KernelContext::error). A kernel without a
/// signature is an error too.
Status checkKernelCall(const KernelContext &ctx);

/// `attrs` with every defaulted attribute of `sig` that is absent set to
/// its default, so that readers take the table's default, not their own.
Attrs withKernelDefaults(const KernelSignature &sig, Attrs attrs);

/// "f16, bf16, f32, f64": a list of element types, for errors.
std::string dtypeListString(const std::vector<DType> &dtypes);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_KERNELS_KERNELSIGNATURE_H
