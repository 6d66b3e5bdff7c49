//===- Serialize.cpp - dexec modules to the runtime's format --------------===//

#include "compiler/Serialize.h"

#include "compiler/Explain.h"
#include "planner/CostPrimitives.h"
#include "runtime/base/DType.h"

#include <map>

#include "dialects/Exec/IR/ExecOps.h"
#include "dialects/Graph/IR/GraphOps.h"
#include "dialects/Shard/IR/ShardOps.h"
#include "runtime/base/DType.h"
#include "runtime/format/Container.h"
#include "runtime/format/ProgramMetadata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/BuiltinDialect.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace dtcc {
namespace {

/// A split variable's or input's layout (its dshard.sharding and
/// dshard.global_type attributes), when it has one.
void setSharding(runtime::format::Sharding *out, Attribute sharding,
                 Attribute globalType) {
  auto s = dyn_cast_or_null<shard::ShardingAttr>(sharding);
  auto type = dyn_cast_or_null<TypeAttr>(globalType);
  if (!s || !type)
    return;
  for (int64_t d : cast<RankedTensorType>(type.getValue()).getShape())
    out->add_global_shape(d);
  for (shard::DimShardingAttr dim : s.getDims()) {
    auto *o = out->add_dims();
    for (StringAttr a : dim.getAxes())
      o->add_axes(a.str());
    o->set_groups(dim.getGroups());
  }
}

/// The runtime's dtype number (ONNX numbering) for an element type.
int32_t dtypeOf(Type type) {
  if (type.isF32()) return 1;
  if (type.isF64()) return 11;
  if (type.isF16()) return 10;
  if (type.isBF16()) return 16;
  if (auto i = dyn_cast<IntegerType>(type)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: return 9;
    case 8: return u ? 2 : 3;
    case 16: return u ? 4 : 5;
    case 32: return u ? 12 : 6;
    case 64: return u ? 13 : 7;
    default: break;
    }
  }
  return 0;
}

/// The bytes of an elements attribute in the runtime's layout (row-major,
/// little-endian, one byte per i1).
FailureOr<std::string> elementsBytes(ElementsAttr attr, Location loc) {
  auto type = cast<ShapedType>(attr.getType());
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return emitError(loc, "resource '")
             << resource.getRawHandle().getKey() << "' has no data";
    ArrayRef<char> data = blob->getData();
    return std::string(data.begin(), data.end());
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return emitError(loc, "cannot serialize constant of kind ") << attr;
  int64_t n = type.getNumElements();
  if (type.getElementType().isInteger(1)) {
    std::string out(n, '\0');
    int64_t i = 0;
    for (bool b : dense.getValues<bool>())
      out[i++] = b;
    return out;
  }
  ArrayRef<char> raw = dense.getRawData();
  if (dense.isSplat()) {
    std::string out;
    out.reserve(raw.size() * n);
    for (int64_t i = 0; i < n; ++i)
      out.append(raw.begin(), raw.end());
    return out;
  }
  return std::string(raw.begin(), raw.end());
}

/// Appends `bytes` to the data section at a 64-byte boundary.
bool isZeroSplat(DenseElementsAttr dense) {
  Attribute v = dense.getSplatValue<Attribute>();
  if (auto f = dyn_cast<FloatAttr>(v))
    return f.getValue().isPosZero();
  if (auto i = dyn_cast<IntegerAttr>(v))
    return i.getValue().isZero();
  return false;
}

runtime::format::DataRef appendData(std::string &data, const std::string &bytes) {
  data.resize((data.size() + 63) / 64 * 64, '\0');
  runtime::format::DataRef ref;
  ref.set_offset(data.size());
  ref.set_size(bytes.size());
  data += bytes;
  return ref;
}

LogicalResult convertAttr(Attribute attr, runtime::format::AttrValue &out) {
  if (auto b = dyn_cast<BoolAttr>(attr)) {
    out.set_i(b.getValue());
  } else if (auto i = dyn_cast<IntegerAttr>(attr)) {
    out.set_i(i.getValue().getSExtValue());
  } else if (auto f = dyn_cast<FloatAttr>(attr)) {
    out.set_f(f.getValueAsDouble());
  } else if (auto s = dyn_cast<StringAttr>(attr)) {
    out.set_s(s.str());
  } else if (isa<UnitAttr>(attr)) {
    out.set_i(1);
  } else if (auto a = dyn_cast<DenseI64ArrayAttr>(attr)) {
    out.mutable_ints(); // an empty array is still an array
    for (int64_t v : a.asArrayRef())
      out.mutable_ints()->add_values(v);
  } else if (auto a = dyn_cast<DenseF64ArrayAttr>(attr)) {
    out.mutable_floats();
    for (double v : a.asArrayRef())
      out.mutable_floats()->add_values(v);
  } else if (auto a = dyn_cast<DenseF32ArrayAttr>(attr)) {
    out.mutable_floats();
    for (float v : a.asArrayRef())
      out.mutable_floats()->add_values(v);
  } else if (auto a = dyn_cast<ArrayAttr>(attr)) {
    bool allInts = llvm::all_of(a, [](Attribute e) { return isa<IntegerAttr>(e); });
    bool allFloats = llvm::all_of(a, [](Attribute e) { return isa<FloatAttr>(e); });
    if (allInts) {
      out.mutable_ints();
      for (Attribute e : a)
        out.mutable_ints()->add_values(cast<IntegerAttr>(e).getInt());
    } else if (allFloats) {
      out.mutable_floats();
      for (Attribute e : a)
        out.mutable_floats()->add_values(cast<FloatAttr>(e).getValueAsDouble());
    } else {
      return failure();
    }
  } else {
    return failure();
  }
  return success();
}

} // namespace

std::string locationName(Location loc) { return graph::nodeName(loc); }

FailureOr<SerializedProgram> serializeProgram(ModuleOp module) {
  SerializedProgram out;
  runtime::format::Program &program = out.program;
  program.set_format_version(runtime::kProgramFormatVersion);
  auto bytesAttr = [&](StringRef name) -> int64_t {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  if (!module->hasAttr("dexec.workspace_bytes"))
    return module.emitError("expected a module lowered to dexec "
                            "(run dtcc-lower-to-exec first)");
  program.set_workspace_bytes(bytesAttr("dexec.workspace_bytes"));
  program.set_state_bytes(bytesAttr("dexec.state_bytes"));
  program.set_constant_bytes(bytesAttr("dexec.constant_bytes"));
  program.set_host_workspace_bytes(bytesAttr("dexec.host_workspace_bytes"));
  program.set_host_state_bytes(bytesAttr("dexec.host_state_bytes"));
  // The training step's facts, from the module's typed attributes
  // (runtime/format/ProgramMetadata.h).
  auto &meta = *program.mutable_metadata();
  if (auto name = module->getAttrOfType<StringAttr>(graph::kModelAttr))
    meta[runtime::metadata::kModel] = name.str();
  if (auto optimizer = module->getAttrOfType<StringAttr>(graph::kOptimizerAttr)) {
    meta[runtime::metadata::kTrain] = "1";
    meta[runtime::metadata::kOptimizer] = optimizer.str();
    // The runtime calls @train_step this many times per optimizer step
    // (docs/training-abi.md): the plan's accumulation steps.
    shard::PlanAttr plan = shard::getPlan(module);
    meta[runtime::metadata::kMicroBatches] =
        std::to_string(plan ? plan.getAccumulationSteps() : 1);
    if (plan && plan.getPipelineStages() > 1)
      meta[runtime::metadata::kPipelineSchedule] =
          shard::stringifyPipelineSchedule(plan.getSchedule()).str() +
          (plan.getVirtualStages() > 1
               ? " " + std::to_string(plan.getVirtualStages())
               : std::string());
  }
  // Lists of names, comma-separated: the data inputs, the parameters left
  // untrained.
  for (auto [attr, key] : {std::pair{graph::kDataInputsAttr,
                                     runtime::metadata::kDataInputs},
                           std::pair{graph::kUntrainedAttr,
                                     runtime::metadata::kUntrained}})
    if (auto names = module->getAttrOfType<ArrayAttr>(attr))
      meta[key] = llvm::join(names.getAsValueRange<StringAttr>(), ",");
  if (auto vocab = module->getAttrOfType<IntegerAttr>(graph::kVocabSizeAttr))
    meta[runtime::metadata::kVocabSize] = std::to_string(vocab.getInt());
  if (auto dtype = module->getAttrOfType<StringAttr>(graph::kDtypeAttr))
    meta[runtime::metadata::kDtype] = dtype.str();
  if (auto text = module->getAttrOfType<StringAttr>(graph::kRecomputedAttr))
    meta[runtime::metadata::kRecompute] = text.str();
  if (auto text =
          module->getAttrOfType<StringAttr>(graph::kFusedAttentionAttr))
    meta[runtime::metadata::kFusedAttention] = text.str();

  if (auto mesh = module->getAttrOfType<shard::MeshAttr>(shard::kMeshAttr))
    for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getSizes())) {
      program.mutable_mesh()->add_axes(axis.str());
      program.mutable_mesh()->add_sizes(size);
    }

  auto addBuffer = [&](runtime::format::Arena arena, int64_t offset,
                       MemRefType type, StringRef name,
                       std::optional<ArrayRef<int64_t>> live =
                           std::nullopt) -> int32_t {
    auto *b = program.add_buffers();
    b->set_id(program.buffers_size() - 1);
    b->set_dtype(dtypeOf(type.getElementType()));
    for (int64_t d : type.getShape())
      b->add_shape(d);
    if (!type.getLayout().isIdentity()) {
      SmallVector<int64_t> strides;
      int64_t ignored;
      (void)type.getStridesAndOffset(strides, ignored);
      for (int64_t s : strides)
        b->add_strides(s);
    }
    b->set_arena(arena);
    b->set_offset(offset);
    b->set_name(name.str());
    if (live) {
      b->mutable_live()->set_first(int32_t((*live)[0]));
      b->mutable_live()->set_last(int32_t((*live)[1]));
    }
    return b->id();
  };

  for (auto var : module.getOps<graph::VariableOp>()) {
    auto offset = var->getAttrOfType<IntegerAttr>("dexec.offset");
    if (!offset)
      return var.emitOpError("has no state offset (run dtcc-lower-to-exec)");
    auto type = var.getTensorType();
    if (!dtypeOf(type.getElementType()))
      return var.emitOpError("has an element type the runtime lacks: ")
             << type.getElementType();
    auto *v = program.add_variables();
    v->set_name(var.getSymName().str());
    auto arena = var->getAttrOfType<StringAttr>("dexec.arena");
    v->set_buffer(addBuffer(arena && arena.getValue() == "host_state"
                                ? runtime::format::ARENA_HOST_STATE
                                : runtime::format::ARENA_STATE,
                            offset.getInt(),
                            MemRefType::get(type.getShape(),
                                            type.getElementType()),
                            var.getSymName()));
    v->set_trainable(var.getTrainable());
    if (auto stage = var->getAttrOfType<IntegerAttr>(shard::kStageAttr))
      v->set_stage(stage.getInt());
    if (auto from =
            var->getAttrOfType<FlatSymbolRefAttr>(graph::kRoundedFromAttr))
      v->set_rounded_from(from.getValue().str());
    if (var->hasAttr(shard::kShardingAttr))
      setSharding(v->mutable_sharding(), var->getAttr(shard::kShardingAttr),
                  var->getAttr(shard::kGlobalTypeAttr));
    auto init = var.getInitialValueAttr();
    auto dense = dyn_cast_or_null<DenseElementsAttr>(init);
    if (dense && dense.isSplat() && isZeroSplat(dense)) {
      v->set_zero_init(true); // optimizer state: no bytes in the data section
    } else if (init) {
      auto bytes = elementsBytes(init, var.getLoc());
      if (failed(bytes))
        return failure();
      *v->mutable_init() = appendData(out.data, *bytes);
    }
  }

  llvm::DenseMap<int64_t, bool> constantsWritten;
  for (auto fn : module.getOps<func::FuncOp>()) {
    auto *f = program.add_functions();
    f->set_name(fn.getSymName().str());
    if (auto ws = fn->getAttrOfType<IntegerAttr>("dexec.workspace_bytes"))
      f->set_workspace_bytes(ws.getInt());
    if (auto ws = fn->getAttrOfType<IntegerAttr>("dexec.host_workspace_bytes"))
      f->set_host_workspace_bytes(ws.getInt());
    if (auto stage = fn->getAttrOfType<IntegerAttr>(shard::kStageAttr))
      f->set_stage(stage.getInt());
    llvm::DenseMap<Value, int32_t> ids;
    for (Operation &op : fn.getBody().front()) {
      if (auto buffer = dyn_cast<exec::BufferOp>(op)) {
        auto arena = llvm::StringSwitch<runtime::format::Arena>(buffer.getArena())
                         .Case("state", runtime::format::ARENA_STATE)
                         .Case("constant", runtime::format::ARENA_CONSTANT)
                         .Case("host_workspace",
                               runtime::format::ARENA_HOST_WORKSPACE)
                         .Case("host_state", runtime::format::ARENA_HOST_STATE)
                         .Default(runtime::format::ARENA_WORKSPACE);
        if (!dtypeOf(buffer.getType().getElementType()))
          return buffer.emitOpError("has an element type the runtime lacks: ")
                 << buffer.getType().getElementType();
        StringRef name = buffer.getVariable() ? *buffer.getVariable() : "";
        ids[buffer.getResult()] =
            addBuffer(arena, buffer.getOffset(), buffer.getType(), name,
                      buffer.getLive());
        // A constant shared by several functions has one offset; one of no
        // elements has no bytes, and may sit at the offset of the next
        // constant: it must not count as that one written (its data was
        // then never written: zeros where Video Swin's mask indices were).
        if (arena == runtime::format::ARENA_CONSTANT &&
            buffer.getType().getNumElements() > 0 &&
            !constantsWritten[buffer.getOffset()]) {
          constantsWritten[buffer.getOffset()] = true;
          auto bytes = elementsBytes(*buffer.getValue(), buffer.getLoc());
          if (failed(bytes))
            return failure();
          auto *c = program.add_constants();
          c->set_buffer(ids[buffer.getResult()]);
          *c->mutable_data() = appendData(out.data, *bytes);
        }
      } else if (auto input = dyn_cast<exec::InputOp>(op)) {
        auto *b = f->add_inputs();
        b->set_name(input.getName().str());
        b->set_buffer(ids.lookup(input.getBuffer()));
        if (input->hasAttr(shard::kShardingAttr))
          setSharding(b->mutable_sharding(), input->getAttr(shard::kShardingAttr),
                      input->getAttr(shard::kGlobalTypeAttr));
      } else if (auto output = dyn_cast<exec::OutputOp>(op)) {
        auto *b = f->add_outputs();
        b->set_name(output.getName().str());
        b->set_buffer(ids.lookup(output.getBuffer()));
      } else if (auto kernel = dyn_cast<exec::KernelOp>(op)) {
        auto *inst = f->add_instructions();
        inst->set_kernel(kernel.getKernel().str());
        inst->set_host(kernel.getHost());
        for (Value v : kernel.getIns())
          inst->add_inputs(ids.lookup(v));
        for (Value v : kernel.getOuts())
          inst->add_outputs(ids.lookup(v));
        for (NamedAttribute attr : kernel.getAttrs()) {
          // Where the op sat in the model is the compiler's, not the kernel's.
          if (attr.getName() == graph::kLayerAttr)
            continue;
          runtime::format::AttrValue value;
          if (failed(convertAttr(attr.getValue(), value)))
            return kernel.emitOpError("cannot serialize attribute '")
                   << attr.getName().getValue() << "' = " << attr.getValue();
          (*inst->mutable_attrs())[attr.getName().str()] = value;
        }
        inst->set_location(locationName(kernel.getLoc()));
      } else if (!isa<func::ReturnOp>(op)) {
        return op.emitOpError("cannot be serialized: not a dexec op");
      }
    }
  }
  recordTraffic(program);
  // What its transfers move between the device and the host, per call.
  for (const auto &f : program.functions()) {
    int64_t toHost = 0, toDevice = 0;
    for (const auto &inst : f.instructions()) {
      bool in = inst.kernel() == exec::kCopyToHostKernel;
      if ((!in && inst.kernel() != exec::kCopyToDeviceKernel) ||
          inst.inputs_size() != 1)
        continue;
      const auto &b = program.buffers(inst.inputs(0));
      int64_t bytes = runtime::dtypeSize(runtime::DType(b.dtype()));
      for (int64_t d : b.shape())
        bytes *= d;
      (in ? toHost : toDevice) += bytes;
    }
    if (toHost + toDevice == 0)
      continue;
    auto &meta = *program.mutable_metadata();
    meta[runtime::metadata::kBytesToHostPrefix + f.name()] = std::to_string(toHost);
    meta[runtime::metadata::kBytesToDevicePrefix + f.name()] = std::to_string(toDevice);
  }
  return out;
}

void recordTraffic(runtime::format::Program &program) {
  auto target = program.metadata().find(runtime::metadata::kTarget);
  const bool cpu =
      target == program.metadata().end() || target->second == "cpu";
  std::map<std::string, int64_t> sent, handed;
  for (const CollectiveInfo &c : listCollectives(program)) {
    sent[c.function] += 0; // every function with collectives is listed
    handed[c.function] += 0;
    const int64_t n = c.groupSize;
    if (n <= 1)
      continue; // a group of one moves nothing
    // The CPU communicators widen f16/bf16 to f32 before a reduction.
    const int64_t widen = cpu && c.stagedInF32OnCpu ? 2 : 1;
    sent[c.function] += c.sentBytes * widen;
    int64_t h = 0;
    if (c.kind == "all_reduce" || c.kind == "reduce_scatter" ||
        c.kind == "all_to_all" || c.kind == "send")
      h = c.tensorBytes * widen;
    else if (c.kind == "all_gather")
      h = c.tensorBytes / n; // this rank's block
    else if (c.kind == "broadcast")
      h = c.tensorBytes / n; // the root's buffer, averaged over the group
    handed[c.function] += h;
  }
  auto &metadata = *program.mutable_metadata();
  for (const auto &[fn, bytes] : sent)
    metadata[runtime::metadata::kBytesSentPrefix + fn] = std::to_string(bytes);
  for (const auto &[fn, bytes] : handed)
    metadata[runtime::metadata::kBytesHandedPrefix + fn] = std::to_string(bytes);
}

} // namespace dtcc
