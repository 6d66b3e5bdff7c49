//===- Kernel.h - the kernel interface of the runtime -----------*- C++ -*-===//
//
// A kernel is created once per instruction when a program is loaded: its
// factory checks dtypes, shapes and attributes and returns a closure bound to
// the instruction's buffers. Running a step then only calls the closures.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_KERNEL_H
#define DTCC_RUNTIME_EXEC_KERNEL_H

#include "runtime/base/DType.h"
#include "runtime/base/Status.h"
#include "runtime/exec/Scratch.h"

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace dtcc::runtime {

class CommContext;
class GeneratedKernels;
namespace format {
class Instruction;
} // namespace format

/// A view of a tensor in device memory (on the CPU: host memory).
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
  /// Strides in elements, one per dimension. A stride of 0 repeats the
  /// element (a broadcast view). Outputs are contiguous but where the
  /// kernel-signature table marks them RowStrided (attention's), whose
  /// views reach each element once.
  std::vector<int64_t> strides;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  int64_t sizeInBytes() const { return numel() * dtypeSize(dtype); }
  bool isContiguous() const;
  template <typename T> T *as() const { return static_cast<T *>(data); }
  /// "tensor<2x3xf32>", as in MLIR.
  std::string typeString() const;
};

/// Row-major strides of `shape`.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape);
/// A contiguous view of `shape` at `data`.
TensorView makeView(void *data, DType dtype, std::vector<int64_t> shape);

/// Attribute values of an instruction, by name (the dgraph op's attributes:
/// a unit attribute is the integer 1 when present).
class Attrs {
public:
  using Value =
      std::variant<int64_t, double, std::string, std::vector<int64_t>,
                   std::vector<double>, std::vector<std::string>>;

  void set(const std::string &name, Value value) { values_[name] = value; }
  bool has(const std::string &name) const { return values_.count(name); }

  StatusOr<int64_t> getInt(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t fallback) const;
  bool getBool(const std::string &name, bool fallback = false) const {
    return getInt(name, fallback ? 1 : 0) != 0;
  }
  StatusOr<double> getFloat(const std::string &name) const;
  double getFloat(const std::string &name, double fallback) const;
  StatusOr<std::string> getString(const std::string &name) const;
  std::string getString(const std::string &name,
                        const std::string &fallback) const;
  StatusOr<std::vector<int64_t>> getInts(const std::string &name) const;
  /// A string list; a single string is a list of its comma-separated parts.
  StatusOr<std::vector<std::string>>
  getStrings(const std::string &name) const {
    auto it = values_.find(name);
    if (it == values_.end())
      return invalidArgument("missing attribute '", name, "'");
    if (auto *v = std::get_if<std::vector<std::string>>(&it->second))
      return *v;
    if (auto *v = std::get_if<std::string>(&it->second)) {
      std::vector<std::string> parts;
      size_t start = 0;
      for (;;) {
        size_t comma = v->find(',', start);
        parts.push_back(v->substr(start, comma - start));
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
      return parts;
    }
    return invalidArgument("attribute '", name,
                           "' is not a string list");
  }

  const std::map<std::string, Value> &all() const { return values_; }

private:
  std::map<std::string, Value> values_;
};

/// The attributes of a serialized instruction, as its kernel reads them.
Attrs instructionAttrs(const format::Instruction &inst);

/// What a kernel factory receives for one instruction.
struct KernelContext {
  std::string kernel;   ///< kernel name, e.g. "matmul"
  std::string location; ///< the ONNX node that produced the instruction
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  Attrs attrs;
  /// The mesh's communicators (runtime/comm/CommContext.h) when the program
  /// runs on a device mesh; null otherwise. Only collective kernels use it,
  /// and they fail to bind without it.
  CommContext *comm = nullptr;
  /// The scratch requests of the program being bound (runtime/exec/
  /// Scratch.h); null where kernels are bound one by one without a plan, and
  /// then a kernel that needs scratch fails to bind.
  ScratchPlan *scratch = nullptr;
  /// The compiler's generated kernels (the program's fused regions,
  /// runtime/exec/GeneratedKernels.h); null when it has none. Only `fused`
  /// uses it.
  const GeneratedKernels *generated = nullptr;

  /// Declares the scratch this instruction needs; its slots point into the
  /// reservation once the device has made it (before the first run).
  StatusOr<std::vector<ScratchSlot>> requestScratch(ScratchSet set) const {
    if (!scratch)
      return error("needs device scratch memory, but it is bound without a "
                   "scratch plan (bind it as part of a program)");
    return scratch->request(std::move(set));
  }

  /// An invalid-argument error prefixed with the kernel and location.
  template <typename... Args> Status error(const Args &...args) const {
    return invalidArgument(kernel, " at '", location, "': ", args...);
  }
};

/// A bound kernel: runs one instruction.
using KernelFn = std::function<Status()>;
/// Checks an instruction and binds it; errors name the kernel and location.
using KernelFactory = std::function<StatusOr<KernelFn>(const KernelContext &)>;

/// Kernels of one device, by name.
class KernelRegistry {
public:
  /// Registers `factory`, which then binds only instructions that pass
  /// checkKernelCall: the kernel-signature table's counts, element types,
  /// ranks, relations and attributes (runtime/kernels/KernelSignature.h).
  void add(const std::string &name, KernelFactory factory);
  const KernelFactory *find(const std::string &name) const;
  std::vector<std::string> names() const;

private:
  std::map<std::string, KernelFactory> factories_;
};

/// Registers every CPU kernel (runtime/device/cpu).
void registerCpuKernels(KernelRegistry &registry);
/// A process-wide registry of every CPU kernel, made on first use.
const KernelRegistry &cpuKernels();

/// Checks counts of inputs and outputs, for factories.
Status expectArity(const KernelContext &ctx, size_t inputs, size_t outputs);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_KERNEL_H
