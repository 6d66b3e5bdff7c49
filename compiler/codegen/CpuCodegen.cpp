//===- CpuCodegen.cpp - fused regions to a shared object for the CPU ------===//

#include "compiler/codegen/CpuCodegen.h"
#include "runtime/device/cpu/VectorMath.h"
#include "runtime/exec/GeneratedKernels.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Analysis/AssumptionCache.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/Analysis/ScalarEvolution.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/IR/DiagnosticHandler.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

using namespace mlir;

namespace dtcc::codegen {

ModuleOp findKernelsModule(ModuleOp module) {
  return module.lookupSymbol<ModuleOp>(kKernelsModuleName);
}

std::string findCpuLinker(const CpuCodegenOptions &options) {
  if (!options.linker.empty())
    return options.linker;
  // A linker named that does not run is no linker.
  if (auto env = llvm::sys::Process::GetEnv("DTCC_LLD"))
    return llvm::sys::fs::can_execute(*env) ? *env : "";
  for (const char *name : {"ld.lld-22", "ld.lld"})
    if (auto path = llvm::sys::findProgramByName(name))
      return *path;
  if (llvm::sys::fs::can_execute("/usr/lib/llvm-22/bin/ld.lld"))
    return "/usr/lib/llvm-22/bin/ld.lld";
  return "";
}

namespace {

/// Checks that `fn` has the region form: memref arguments of static shape
/// and identity layout, no results.
LogicalResult checkRegionForm(func::FuncOp fn) {
  if (fn.isExternal())
    return fn.emitOpError("is a region function without a body");
  if (fn.getNumResults() != 0)
    return fn.emitOpError("is a region function with results: expected its "
                          "outputs as memref arguments");
  for (Type t : fn.getArgumentTypes()) {
    auto memref = dyn_cast<MemRefType>(t);
    if (!memref || !memref.hasStaticShape() || !memref.getLayout().isIdentity())
      return fn.emitOpError("region function argument ")
             << t << ": expected a memref of static shape and identity layout";
  }
  return success();
}

/// The widest vector registers of the host: 512 bits with AVX-512, 256 with
/// AVX2, else 128.
unsigned hostVectorBits(const llvm::TargetMachine &tm) {
  const llvm::MCSubtargetInfo &sti = *tm.getMCSubtargetInfo();
  return sti.checkFeatures("+avx512f") ? 512
         : sti.checkFeatures("+avx2")  ? 256
                                       : 128;
}

/// The width of libmvec's variants the kernels call (VectorMath.cpp): its
/// AVX2 ones where the host has AVX2, else SSE's; on AVX-512 hosts expf and
/// logf also at 512 bits (kWideMath), whose bits are the AVX2 variants'.
unsigned mathVectorBits(const llvm::TargetMachine &tm) {
  return std::min(hostVectorBits(tm), 256u);
}
constexpr const char *kWideMath[] = {"exp", "log"};

/// The libmvec functions the CPU kernels call (runtime/device/cpu/
/// VectorMath.h) beyond LLVM's preset (exp, log, sin, cos, tan), in the
/// variants for `bits`-wide registers, and kWideMath's for `wideBits`: the
/// vectorized loops call the same functions, so a region computes what the
/// kernels it replaces do, and the runner links libmvec. (erf of f32 is
/// ErfRational's arithmetic inline: erfAsRational.)
void addKernelVectorMath(llvm::TargetLibraryInfoImpl &tlii, unsigned bits,
                         unsigned wideBits) {
  static std::vector<std::string> storage; // VecDesc keeps StringRefs
  std::vector<llvm::VecDesc> descs;
  auto add = [&](std::string scalar, std::string vector, unsigned vf) {
    storage.push_back(std::move(scalar));
    StringRef s = storage.back();
    storage.push_back(std::move(vector));
    StringRef v = storage.back();
    storage.push_back("_ZGV_LLVM_N" + std::to_string(vf) + "v");
    descs.emplace_back(s, v, llvm::ElementCount::getFixed(vf), false,
                       StringRef(storage.back()), std::nullopt);
  };
  storage.reserve(128);
  auto isaOf = [](unsigned b) {
    return std::string(b == 512 ? "e" : b == 256 ? "d" : "b");
  };
  auto addF32 = [&](const std::string &fn, unsigned b) {
    std::string v =
        "_ZGV" + isaOf(b) + "N" + std::to_string(b / 32) + "v_" + fn + "f";
    add(fn + "f", v, b / 32);
    add("llvm." + fn + ".f32", v, b / 32);
  };
  for (std::string fn : {"tanh", "erf", "exp", "log"}) {
    addF32(fn, bits);
    std::string vf64 =
        "_ZGV" + isaOf(bits) + "N" + std::to_string(bits / 64) + "v_" + fn;
    add(fn, vf64, bits / 64);
    add("llvm." + fn + ".f64", vf64, bits / 64);
  }
  if (wideBits > bits)
    for (std::string fn : kWideMath)
      addF32(fn, wideBits);
  tlii.addVectorizableFunctions(descs);
}

/// How `inst` bears on its loop's vector width: 0 no math call, 1 a call of
/// kWideMath's for f32, 2 another math function the vectorizer maps to
/// libmvec.
int vectorMathCall(const llvm::Instruction &inst) {
  const auto *call = llvm::dyn_cast<llvm::CallInst>(&inst);
  if (!call)
    return 0;
  const llvm::Function *callee = call->getCalledFunction();
  if (!callee)
    return 2;
  const bool f32 = call->getType()->isFloatTy();
  if (!callee->isIntrinsic()) {
    for (const char *fn : kWideMath)
      if (f32 && callee->getName() == std::string(fn) + "f")
        return 1;
    return 2;
  }
  switch (callee->getIntrinsicID()) {
  case llvm::Intrinsic::exp:
  case llvm::Intrinsic::log:
    return f32 ? 1 : 2;
  case llvm::Intrinsic::exp2:
  case llvm::Intrinsic::log2:
  case llvm::Intrinsic::log10:
  case llvm::Intrinsic::sin:
  case llvm::Intrinsic::cos:
  case llvm::Intrinsic::tan:
  case llvm::Intrinsic::tanh:
  case llvm::Intrinsic::pow:
    return 2;
  default:
    return 0;
  }
}

/// A region of at most this many elements (every buffer it reads or
/// writes) is compiled without unrolling its loops: it runs in well under
/// a microsecond either way, and LLVM's full unrolling of its short static
/// loops into straight-line code, which the SLP vectorizer then searches,
/// was most of a small graph's compile (a 3x4x5 region: 0.3 of the 0.45 s).
constexpr int64_t kSmallRegionElements = 4096;
/// The LLVM function attribute that marks such a region's body.
constexpr const char *kSmallRegionAttr = "dtcc-small-region";

/// Whether every buffer of region function `fn` is static and at most
/// kSmallRegionElements.
bool isSmallRegion(func::FuncOp fn) {
  return llvm::all_of(fn.getArgumentTypes(), [](Type type) {
    auto memref = dyn_cast<MemRefType>(type);
    return !memref || (memref.hasStaticShape() &&
                       memref.getNumElements() <= kSmallRegionElements);
  });
}

/// Adds `hints` (each a node of its name, then its values) to `loop`'s
/// metadata, keeping the hints it has.
void addLoopHints(llvm::Loop *loop, ArrayRef<llvm::Metadata *> hints) {
  llvm::LLVMContext &c = loop->getHeader()->getContext();
  SmallVector<llvm::Metadata *> all = {nullptr};
  if (llvm::MDNode *id = loop->getLoopID())
    all.append(id->op_begin() + 1, id->op_end());
  all.append(hints.begin(), hints.end());
  llvm::MDNode *id = llvm::MDNode::getDistinct(c, all);
  id->replaceOperandWith(0, id);
  loop->setLoopID(id);
}

/// Asks the loop vectorizer for whole vector registers in every innermost
/// loop that carries no float (the elements' loops of the regions), bits /
/// 64 lanes where the loop computes in f64 and bits / 32 otherwise: the
/// host's widest registers, or libmvec's width (mathVectorBits) where the
/// loop calls a math function, so that it calls the variant the kernels do. A
/// loop whose calls are all kWideMath's takes the widest registers where its
/// trip count is a multiple of their lanes: a scalar remainder would call
/// libm, whose bits differ from libmvec's. Left to its cost model LLVM may
/// take narrower vectors (four lanes for a bf16 GELU, whose conversions it
/// prices high) or, under the CPU's preference for 256-bit vectors, half
/// of AVX-512's.
void vectorizeAtRegisterWidth(llvm::Module &module,
                              const llvm::TargetMachine &tm,
                              const llvm::TargetLibraryInfoImpl &tlii) {
  llvm::LLVMContext &c = module.getContext();
  const unsigned wide = hostVectorBits(tm), math = mathVectorBits(tm);
  for (llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    f.addFnAttr("prefer-vector-width", std::to_string(wide));
    llvm::DominatorTree dominators(f);
    llvm::LoopInfo loops(dominators);
    llvm::TargetLibraryInfo tli(tlii, &f);
    llvm::AssumptionCache assumptions(f);
    llvm::ScalarEvolution scev(f, tli, assumptions, dominators, loops);
    const bool small = f.hasFnAttribute(kSmallRegionAttr);
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      if (small)
        addLoopHints(
            loop, {llvm::MDNode::get(c, {llvm::MDString::get(
                                            c, "llvm.loop.unroll.disable")})});
      if (!loop->isInnermost())
        continue;
      // A loop that carries a float (a row reduction's lanes, a blocked
      // sum's total) keeps its order: a vectorization hint lets LLVM
      // reassociate floating-point reductions (LoopVectorizeHints::
      // allowReordering), into partial sums that depend on the register
      // width (an AVX2 host's row sums then differed from the kernels' by
      // an ulp). Its explicit lanes vectorize as they are (SLP).
      if (llvm::any_of(loop->getHeader()->phis(), [](llvm::PHINode &phi) {
            return phi.getType()->isFPOrFPVectorTy();
          }))
        continue;
      bool f64 = false;
      int calls = 0;
      for (llvm::BasicBlock *block : loop->blocks())
        for (llvm::Instruction &inst : *block) {
          f64 |= inst.getType()->getScalarType()->isDoubleTy();
          calls = std::max(calls, vectorMathCall(inst));
        }
      unsigned bits = calls == 0 ? wide : math;
      if (calls == 1 && !f64) {
        // The header's runs; straight from scf.for the exit test is at the
        // header, and the body (an element each) runs one time fewer.
        unsigned trips = scev.getSmallConstantTripCount(loop);
        if (trips != 0 && loop->getExitingBlock() == loop->getHeader() &&
            loop->getHeader() != loop->getLoopLatch())
          --trips;
        if (trips != 0 && trips % (wide / 32) == 0)
          bits = wide;
      }
      auto *width = llvm::ConstantInt::get(llvm::Type::getInt32Ty(c),
                                           bits / (f64 ? 64 : 32));
      addLoopHints(
          loop, {llvm::MDNode::get(
                     c, {llvm::MDString::get(c, "llvm.loop.vectorize.width"),
                         llvm::ConstantAsMetadata::get(width)}),
                 llvm::MDNode::get(
                     c, {llvm::MDString::get(c, "llvm.loop.vectorize.enable"),
                         llvm::ConstantAsMetadata::get(
                             llvm::ConstantInt::getTrue(c))})});
    }
  }
}

/// Runs LLVM's O3 pipeline (the loop vectorizer included) for `tm`, with
/// the kernels' vector math functions.
void optimize(llvm::Module &module, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  addKernelVectorMath(tlii, mathVectorBits(tm), hostVectorBits(tm));
  vectorizeAtRegisterWidth(module, tm, tlii);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  // libm's functions here have no side effect the loops must keep (no
  // errno: the kernels are compiled with -fno-math-errno).
  for (llvm::Function &f : module)
    if (f.isDeclaration() && !f.isIntrinsic()) {
      f.setDoesNotAccessMemory();
      f.setDoesNotThrow();
      f.setWillReturn();
    }
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  // One vector per iteration: rows whose length is a multiple of the vector
  // width then have no scalar remainder, whose libm calls would differ from
  // the kernels' libmvec ones by an ulp.
  tuning.LoopInterleaving = false;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm =
      pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

} // namespace

LogicalResult
writeDumpFile(Operation *at, StringRef dir, StringRef name,
              llvm::function_ref<void(llvm::raw_ostream &)> write) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return at->emitError("cannot write '") << path << "': " << ec.message();
  write(os);
  return success();
}

/// Gives a region function, lowered to loops, the range of its outermost
/// loop as two trailing `index` arguments [begin, end): the runtime splits a
/// region's rows over its threads (every element is still computed by one
/// thread in one order). A region of rank 0 has no loop and ignores them.
static LogicalResult takeOuterRange(func::FuncOp fn) {
  Block &entry = fn.front();
  Location loc = fn.getLoc();
  IndexType index = IndexType::get(fn.getContext());
  BlockArgument begin = entry.addArgument(index, loc);
  BlockArgument end = entry.addArgument(index, loc);
  SmallVector<Type> inputs(fn.getArgumentTypes());
  inputs.append({index, index});
  fn.setType(FunctionType::get(fn.getContext(), inputs, {}));
  SmallVector<scf::ForOp> loops(entry.getOps<scf::ForOp>());
  if (loops.size() > 1)
    return fn.emitOpError("is a region function whose loops are not one nest "
                          "(expected one linalg.generic)");
  if (loops.empty())
    return success();
  scf::ForOp outer = loops.front();
  outer.setLowerBound(begin);
  outer.setUpperBound(end);
  return success();
}

/// `f`'s bits rounded to bfloat16's (nearest even; a NaN stays a quiet
/// NaN), as the runtime's storeBf16 does, in i32 arithmetic.
static Value bf16Bits(OpBuilder &b, Location loc, Value f) {
  auto i32 = b.getI32Type();
  auto c = [&](uint32_t v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  };
  Value u = arith::BitcastOp::create(b, loc, i32, f);
  Value high = arith::ShRUIOp::create(b, loc, u, c(16));
  Value odd = arith::AndIOp::create(b, loc, high, c(1));
  Value biased = arith::AddIOp::create(
      b, loc, arith::AddIOp::create(b, loc, u, c(0x7fff)), odd);
  Value rounded = arith::ShRUIOp::create(b, loc, biased, c(16));
  Value quiet = arith::OrIOp::create(b, loc, high, c(0x40));
  Value isNan = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ugt,
      arith::AndIOp::create(b, loc, u, c(0x7fffffff)), c(0x7f800000));
  Value bits = arith::SelectOp::create(b, loc, isNan, quiet, rounded);
  return arith::TruncIOp::create(b, loc, b.getI16Type(), bits);
}

/// Reads and writes `fn`'s buffers of i1 (masks, one byte per element as
/// the runtime keeps them) and, with `bf16AsBits`, of bf16 as integers:
/// LLVM's loop vectorizer loads i1 one at a time (its bits pack in a
/// vector) but widens loads of i8; and a CPU without AVX512-BF16 has no
/// bf16 arithmetic, so LLVM computes selects of bf16 vectors in f32 and
/// rounds them back with __truncsfbf2, which Debian's libgcc (GCC 12) does
/// not define (the kernels would not load). A mask argument becomes a
/// memref of i8, its loads truncated to i1 and its stores extended from
/// it; a bf16 argument a memref of i16, widened to f32 by a shift and
/// rounded from f32 in integers (bf16Bits), so no bf16 value is left.
static LogicalResult buffersAsIntegers(func::FuncOp fn, bool bf16AsBits) {
  Block &entry = fn.front();
  MLIRContext *ctx = fn.getContext();
  auto i8 = IntegerType::get(ctx, 8), i16 = IntegerType::get(ctx, 16);
  SmallVector<Type> inputs(fn.getArgumentTypes());
  for (BlockArgument arg : entry.getArguments()) {
    auto type = cast<MemRefType>(arg.getType());
    Type element = type.getElementType();
    bool mask = element.isInteger(1), bf16 = bf16AsBits && element.isBF16();
    if (!mask && !bf16)
      continue;
    arg.setType(MemRefType::get(type.getShape(), mask ? i8 : i16));
    inputs[arg.getArgNumber()] = arg.getType();
    for (Operation *user : llvm::make_early_inc_range(arg.getUsers())) {
      OpBuilder b(user);
      Location loc = user->getLoc();
      if (auto load = dyn_cast<memref::LoadOp>(user)) {
        Value raw = memref::LoadOp::create(b, loc, arg, load.getIndices());
        if (mask) {
          load.replaceAllUsesWith(
              arith::TruncIOp::create(b, loc, element, raw).getResult());
        } else {
          // A bf16's bits are the upper half of the f32 it widens to.
          Value wide = arith::ShLIOp::create(
              b, loc, arith::ExtUIOp::create(b, loc, b.getI32Type(), raw),
              arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(16)));
          Value f32 = arith::BitcastOp::create(b, loc, b.getF32Type(), wide);
          for (Operation *reader : llvm::make_early_inc_range(load->getUsers()))
            if (auto ext = dyn_cast<arith::ExtFOp>(reader);
                ext && ext.getType().isF32()) {
              ext.replaceAllUsesWith(f32);
              ext.erase();
            }
          // Readers of the bf16 value itself (none from a region) get it
          // back from the bits.
          if (!load->use_empty())
            load.replaceAllUsesWith(
                arith::BitcastOp::create(b, loc, element, raw).getResult());
        }
        load.erase();
      } else if (auto store = dyn_cast<memref::StoreOp>(user)) {
        Value v = store.getValueToStore();
        Value raw;
        if (mask)
          raw = arith::ExtUIOp::create(b, loc, i8, v);
        else if (auto trunc = v.getDefiningOp<arith::TruncFOp>();
                 trunc && trunc.getIn().getType().isF32())
          raw = bf16Bits(b, loc, trunc.getIn());
        else
          raw = arith::BitcastOp::create(b, loc, i16, v);
        store->setOperand(0, raw);
      } else {
        return user->emitOpError("reads a region's buffer ")
               << type << ": expected memref.load or memref.store";
      }
    }
  }
  fn.setType(FunctionType::get(ctx, inputs, {}));
  return success();
}

/// Replaces every erf of f32 in `fn` by runtime::cpu::ErfRational's
/// operations in its order (fused multiply-adds included), so that a
/// region computes the bits the kernels' vectorMath does, at the speed of
/// straight-line vector code rather than libmvec's erff.
static void erfAsRational(func::FuncOp fn) {
  using runtime::cpu::ErfRational;
  SmallVector<math::ErfOp> erfs;
  fn.walk([&](math::ErfOp op) {
    if (op.getType().isF32())
      erfs.push_back(op);
  });
  for (math::ErfOp op : erfs) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto c = [&](float v) -> Value {
      return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
    };
    // v < -bound ? -bound : v > bound ? bound : v, as ErfRational::eval.
    auto clamp = [&](Value v, float bound) -> Value {
      Value low = c(-bound), high = c(bound);
      Value above = arith::SelectOp::create(
          b, loc,
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, high),
          high, v);
      return arith::SelectOp::create(
          b, loc,
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, v, low), low,
          above);
    };
    auto horner = [&](Value t, ArrayRef<float> coefs) -> Value {
      Value acc = c(coefs.back());
      for (int k = int(coefs.size()) - 2; k >= 0; --k)
        acc = math::FmaOp::create(b, loc, acc, t, c(coefs[k]));
      return acc;
    };
    Value x = clamp(op.getOperand(), ErfRational::kSaturation);
    Value t = arith::MulFOp::create(b, loc, x, x);
    Value p = horner(t, ErfRational::kP), q = horner(t, ErfRational::kQ);
    Value y =
        arith::DivFOp::create(b, loc, arith::MulFOp::create(b, loc, x, p), q);
    op.replaceAllUsesWith(clamp(y, 1.0f));
    op.erase();
  }
}

FailureOr<std::string> compileCpuKernels(ModuleOp kernels,
                                         const CpuCodegenOptions &options) {
  MLIRContext *ctx = kernels.getContext();
  std::string linker = findCpuLinker(options);
  if (linker.empty())
    return kernels.emitError(
        "cannot find ld.lld to link the fused regions' kernels: install "
        "Debian's lld-22 (scripts/setup.sh), set DTCC_LLD, or compile with "
        "--no-fuse");
  // The region functions become `<name>.body`; the exported `<name>`
  // unpacks the buffer array (the kernel ABI shared with the CUDA backend).
  OwningOpRef<ModuleOp> lowered(cast<ModuleOp>(kernels->clone()));
  lowered->setSymNameAttr(nullptr);
  struct Entry {
    std::string name;
    unsigned args;
    bool small; ///< isSmallRegion
  };
  SmallVector<Entry> entries;
  for (auto fn : lowered->getOps<func::FuncOp>()) {
    if (failed(checkRegionForm(fn)))
      return failure();
    entries.push_back(
        {fn.getSymName().str(), fn.getNumArguments(), isSmallRegion(fn)});
    fn->setDiscardableAttrs(DictionaryAttr::get(ctx));
  }
  for (auto &[name, args, small] : entries) {
    auto fn = lowered->lookupSymbol<func::FuncOp>(name);
    if (failed(SymbolTable::replaceAllSymbolUses(
            fn, StringAttr::get(ctx, name + ".body"), *lowered)))
      return failure();
    fn.setSymName(name + ".body");
  }

  PassManager loops(ctx, ModuleOp::getOperationName());
  loops.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  // The parallel row form (the CUDA target's) runs here too: its loops
  // without reductions become nests of scf.for (the rows' outermost then
  // takes the range), its reductions sequential loops (convert-scf-to-cf).
  loops.addNestedPass<func::FuncOp>(createParallelForToNestedForsPass());
  if (failed(loops.run(*lowered)))
    return kernels.emitError("cannot lower the fused regions to loops (see "
                             "the errors above)");
  // Without AVX512-BF16 LLVM lowers a rounding to bf16 to a call of
  // __truncsfbf2, which Debian's libgcc (GCC 12) does not define: the
  // kernels would not load. Round in integer arithmetic instead (to
  // nearest even, NaN kept quiet), as the runtime's kernels do: the
  // buffers' (buffersAsIntegers), and any other rounding left.
  const bool bf16AsBits = !llvm::sys::getHostCPUFeatures().lookup("avx512bf16");
  for (auto fn : lowered->getOps<func::FuncOp>()) {
    if (failed(buffersAsIntegers(fn, bf16AsBits)) || failed(takeOuterRange(fn)))
      return failure();
    erfAsRational(fn);
  }
  if (bf16AsBits) {
    RewritePatternSet bf16(ctx);
    arith::populateExpandBFloat16Patterns(bf16);
    if (failed(applyPatternsGreedily(*lowered, std::move(bf16))))
      return kernels.emitError("cannot expand the fused regions' bf16 "
                               "conversions");
  }
  PassManager pm(ctx, ModuleOp::getOperationName());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  if (failed(pm.run(*lowered)))
    return kernels.emitError("cannot lower the fused regions to the LLVM "
                             "dialect (see the errors above)");

  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  ctx->appendDialectRegistry(registry);
  llvm::LLVMContext llvmContext;
  // vectorizeAtRegisterWidth's widths are requests: a loop the vectorizer
  // cannot take (a row's f32 sum, which it may not reassociate) stays
  // scalar as before, and LLVM's remarks and warnings saying so are not
  // the user's concern. Every other diagnostic goes LLVM's default way.
  struct QuietVectorizerHints : llvm::DiagnosticHandler {
    bool handleDiagnostics(const llvm::DiagnosticInfo &info) override {
      return info.getSeverity() == llvm::DS_Remark ||
             info.getKind() == llvm::DK_OptimizationFailure;
    }
  };
  llvmContext.setDiagnosticHandler(std::make_unique<QuietVectorizerHints>());
  std::unique_ptr<llvm::Module> module =
      translateModuleToLLVMIR(*lowered, llvmContext, "dtcc_kernels");
  if (!module)
    return kernels.emitError("cannot translate the fused regions to LLVM IR");

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return kernels.emitError("no LLVM target for the host (")
           << triple.str() << "): " << error;
  llvm::SubtargetFeatures features;
  for (const auto &[feature, on] : llvm::sys::getHostCPUFeatures())
    features.AddFeature(feature, on);
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, llvm::sys::getHostCPUName(), features.getString(),
      llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  module->setTargetTriple(triple);
  module->setDataLayout(tm->createDataLayout());

  // The exported entry points: void name(void *const *buffers, int64_t
  // begin, int64_t end), and the ABI's version.
  llvm::IRBuilder<> ir(llvmContext);
  llvm::Type *ptr = ir.getPtrTy();
  llvm::Type *i64 = ir.getInt64Ty();
  auto *abi = new llvm::GlobalVariable(
      *module, ir.getInt32Ty(), /*isConstant=*/true,
      llvm::GlobalValue::ExternalLinkage,
      ir.getInt32(runtime::kCpuKernelAbiVersion), runtime::kCpuKernelAbiSymbol);
  abi->setVisibility(llvm::GlobalValue::DefaultVisibility);
  for (auto &[name, args, small] : entries) {
    llvm::Function *body = module->getFunction(name + ".body");
    if (!body)
      return kernels.emitError("region function @") << name << " was lost "
                                                       "in the lowering";
    body->setLinkage(llvm::GlobalValue::InternalLinkage);
    if (small)
      body->addFnAttr(kSmallRegionAttr);
    // The lowering gives a region's outputs buffers of their own, apart
    // from its inputs and each other (the kernel ABI's contract).
    for (llvm::Argument &arg : body->args())
      if (arg.getType()->isPointerTy())
        arg.addAttr(llvm::Attribute::NoAlias);
    auto *entry = llvm::Function::Create(
        llvm::FunctionType::get(ir.getVoidTy(), {ptr, i64, i64}, false),
        llvm::GlobalValue::ExternalLinkage, name, *module);
    entry->setVisibility(llvm::GlobalValue::DefaultVisibility);
    ir.SetInsertPoint(llvm::BasicBlock::Create(llvmContext, "entry", entry));
    SmallVector<llvm::Value *> operands;
    for (unsigned i = 0; i < args; ++i)
      operands.push_back(ir.CreateLoad(
          ptr, ir.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i)));
    operands.push_back(entry->getArg(1));
    operands.push_back(entry->getArg(2));
    ir.CreateCall(body, operands);
    ir.CreateRetVoid();
  }
  if (llvm::verifyModule(*module, &llvm::errs()))
    return kernels.emitError("the fused regions' LLVM IR does not verify");
  optimize(*module, *tm);
  if (!options.dumpDir.empty() &&
      failed(writeDumpFile(
          kernels, options.dumpDir, "kernels.ll",
          [&](llvm::raw_ostream &os) { module->print(os, nullptr); })))
    return failure();

  llvm::SmallVector<char, 0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager codegen;
    if (tm->addPassesToEmitFile(codegen, os, nullptr,
                                llvm::CodeGenFileType::ObjectFile))
      return kernels.emitError("LLVM cannot emit object code for ")
             << triple.str();
    codegen.run(*module);
  }

  // ld.lld -shared: the math functions (tanhf, erff, ...) stay undefined
  // and resolve against the runner's libm when the runtime loads it.
  llvm::SmallString<128> objPath, soPath;
  int fd;
  if (auto ec = llvm::sys::fs::createTemporaryFile("dtcc-kernels", "o", fd, objPath))
    return kernels.emitError("cannot create a temporary file: ") << ec.message();
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os.write(object.data(), object.size());
  }
  if (auto ec = llvm::sys::fs::createTemporaryFile("dtcc-kernels", "so", soPath))
    return kernels.emitError("cannot create a temporary file: ") << ec.message();
  auto cleanup = llvm::scope_exit([&] {
    llvm::sys::fs::remove(objPath);
    llvm::sys::fs::remove(soPath);
  });
  SmallVector<StringRef> argv = {linker, "-shared", "--hash-style=gnu",
                                 "-z", "noexecstack", "-o", soPath, objPath};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(linker, argv, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0)
    return kernels.emitError("linking the fused regions' kernels with '")
           << linker << "' failed (exit " << rc << ")"
           << (message.empty() ? "" : ": ") << message;
  auto so = llvm::MemoryBuffer::getFile(soPath);
  if (!so)
    return kernels.emitError("cannot read the linked kernels '")
           << soPath << "': " << so.getError().message();
  return (*so)->getBuffer().str();
}

} // namespace dtcc::codegen
