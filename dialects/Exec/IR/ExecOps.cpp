//===- ExecOps.cpp - dexec dialect and verifiers --------------------------===//

#include "dialects/Exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace dtcc::exec;

#include "dialects/Exec/IR/ExecOpsDialect.cpp.inc"

void ExecDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Exec/IR/ExecOps.cpp.inc"
      >();
}

LogicalResult BufferOp::verify() {
  StringRef arena = getArena();
  if (arena != "workspace" && arena != "state" && arena != "constant" &&
      !isHostArena(arena))
    return emitOpError("expected arena \"workspace\", \"state\", "
                       "\"constant\", \"host_workspace\" or \"host_state\", "
                       "got \"")
           << arena << "\"";
  auto type = getType();
  int64_t elementBytes =
      std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  if (getOffset() < 0 || getOffset() % elementBytes != 0)
    return emitOpError("expected a non-negative offset that is a multiple of ")
           << elementBytes << ", got " << getOffset();
  if (arena == "constant") {
    auto value = getValueAttr();
    if (!value)
      return emitOpError("expected a value for a constant buffer");
    auto valueType = cast<ShapedType>(value.getType());
    // The value is its storage's: a reshaped view holds as many elements, a
    // strided view (a splat seen with stride 0, a broadcast constant) exactly
    // the elements its extent spans.
    SmallVector<int64_t> strides;
    int64_t offset;
    bool shapeOk = valueType.getNumElements() == type.getNumElements();
    if (!type.getLayout().isIdentity() &&
        succeeded(type.getStridesAndOffset(strides, offset))) {
      int64_t extent = 1;
      for (auto [size, stride] : llvm::zip(type.getShape(), strides))
        extent += (size - 1) * stride;
      shapeOk = type.getNumElements() == 0 ||
                valueType.getNumElements() == extent;
    }
    if (!shapeOk || valueType.getElementType() != type.getElementType())
      return emitOpError("expected a value of shape and type matching ")
             << type << ", got " << valueType;
  }
  if (!type.getLayout().isIdentity()) {
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(type.getStridesAndOffset(strides, offset)) || offset != 0 ||
        llvm::any_of(strides, [](int64_t s) { return s < 0; }))
      return emitOpError("expected a strided layout with zero offset and "
                         "non-negative strides, got ")
             << type;
  }
  if (std::optional<ArrayRef<int64_t>> live = getLive()) {
    if (arena != "workspace" && arena != "host_workspace")
      return emitOpError("expected `live` only on a workspace buffer, got "
                         "one in \"")
             << arena << "\"";
    if (live->size() != 2 || (*live)[0] < 0 || (*live)[0] > (*live)[1])
      return emitOpError("expected `live` to be two kernel indices, "
                         "0 <= first <= last");
  }
  return success();
}

/// Whether a view of `type` reaches no element twice: sorted by stride,
/// each dimension steps past all the smaller ones reach.
static bool reachesEachElementOnce(MemRefType type) {
  if (type.getLayout().isIdentity())
    return true;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return false;
  SmallVector<std::pair<int64_t, int64_t>> dims; // (stride, size)
  for (auto [size, stride] : llvm::zip(type.getShape(), strides))
    if (size > 1)
      dims.push_back({stride, size});
  llvm::sort(dims);
  int64_t reach = 0;
  for (auto [stride, size] : dims) {
    if (stride <= reach)
      return false;
    reach += (size - 1) * stride;
  }
  return true;
}

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("expected a kernel name");
  // Outputs may be strided views (into a larger buffer: attention writes
  // its heads' gradients into a concat's slots), which of them the kernel
  // takes is the kernel-signature table's to say; none may write an
  // element twice.
  for (Value out : getOuts())
    if (!reachesEachElementOnce(cast<MemRefType>(out.getType())))
      return emitOpError("expected outputs that reach each element once, got ")
             << out.getType();
  // Which memory space each operand must be in: the host's for a host
  // kernel, the device's for any other, except across a transfer.
  auto check = [&](ValueRange values, bool host, StringRef what) -> LogicalResult {
    for (Value v : values) {
      auto buffer = v.getDefiningOp<BufferOp>();
      if (!buffer || isHostArena(buffer.getArena()) == host)
        continue;
      return emitOpError("expected ")
             << what << " in " << (host ? "host" : "device") << " arenas, got "
             << "a buffer of \"" << buffer.getArena() << "\"";
    }
    return success();
  };
  bool toHost = getKernel() == kCopyToHostKernel;
  bool toDevice = getKernel() == kCopyToDeviceKernel;
  if (getHost() && (toHost || toDevice))
    return emitOpError("expected a transfer to run on the device, not on the "
                       "host");
  if (failed(check(getIns(), getHost() || toDevice, "inputs")) ||
      failed(check(getOuts(), getHost() || toHost, "outputs")))
    return failure();
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Exec/IR/ExecOps.cpp.inc"
