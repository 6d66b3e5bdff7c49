//===- GpuCodegen.cpp - PTX and cubin for fused regions through MLIR ------===//
//
// Upstream passes do the lowering (convert-linalg-to-parallel-loops,
// convert-parallel-loops-to-gpu, gpu-kernel-outlining, nvvm-attach-target,
// convert-gpu-to-nvvm, gpu-module-to-binary with LLVM's NVPTX backend);
// this file chooses the mapping onto blocks and threads, turns temporaries
// into scratch parameters, merges the kernels into one module and records
// what the runtime needs to launch them.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/GpuCodegen.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace dtcc::codegen {

const char *configuredCudaToolkitDir() { return DTCC_CUDA_TOOLKIT_DIR; }
const char *configuredPtxasPath() { return DTCC_PTXAS; }

/// The one gpu.module every kernel is moved into.
static constexpr llvm::StringLiteral kKernelModuleName = "dtcc_gpu_kernels";

void registerGpuCodegenDialects(DialectRegistry &registry) {
  registry.insert<affine::AffineDialect, arith::ArithDialect,
                  cf::ControlFlowDialect, DLTIDialect, func::FuncDialect,
                  gpu::GPUDialect, linalg::LinalgDialect, LLVM::LLVMDialect,
                  math::MathDialect, memref::MemRefDialect, NVVM::NVVMDialect,
                  scf::SCFDialect>();
  arith::registerConvertArithToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  registerConvertFuncToLLVMInterface(registry);
  index::registerConvertIndexToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  ub::registerConvertUBToLLVMInterface(registry);
  NVVM::registerConvertGpuToNVVMInterface(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}

//===-- The region contract -----------------------------------------------===//

static bool isStaticIdentityMemRef(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  return memref && memref.hasStaticShape() && memref.getLayout().isIdentity() &&
         memref.getElementType().isIntOrFloat();
}

static std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

/// Whether `loop` is the row loop of a region in the parallel row form
/// (dtcc-lower-fuse-regions' parallel-rows): its body holds the passes over
/// the columns as scf.parallel loops.
static bool isRowLoop(scf::ParallelOp loop) {
  return !loop.getBody()->getOps<scf::ParallelOp>().empty();
}

static bool hasRowLoop(func::FuncOp func) {
  return llvm::any_of(func.getBody().front().getOps<scf::ParallelOp>(),
                      isRowLoop);
}

static LogicalResult checkRegion(func::FuncOp func) {
  auto where = [&](Operation *op) {
    return op->emitError() << "fused region '@" << func.getSymName() << "': ";
  };
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes()))
    if (!isStaticIdentityMemRef(type))
      return where(func) << "expected argument " << i
                         << " to be a memref of static shape with the identity "
                            "layout, got "
                         << typeString(type);
  if (func.getNumResults() != 0)
    return where(func) << "expected no results (outputs are buffers), got "
                       << func.getNumResults();
  if (!func.getBody().hasOneBlock())
    return where(func) << "expected one block";
  for (Operation &op : func.getBody().front()) {
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
      if (!linalgOp.hasPureBufferSemantics())
        return where(&op) << "expected '" << op.getName()
                          << "' on memrefs (buffer semantics), got tensors";
      continue;
    }
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      if (!isStaticIdentityMemRef(alloc.getType()))
        return where(&op) << "expected a temporary of static shape with the "
                             "identity layout, got "
                          << typeString(alloc.getType());
      continue;
    }
    if (isa<memref::DeallocOp, arith::ConstantOp>(op))
      continue;
    if (isa<func::ReturnOp>(op))
      continue;
    if (auto loop = dyn_cast<scf::ParallelOp>(op); loop && isRowLoop(loop))
      continue;
    return where(&op) << "expected linalg ops, the row loop of the parallel "
                         "row form, static memref.alloc/dealloc and "
                         "constants, got '"
                      << op.getName() << "'";
  }
  return success();
}

//===-- Mapping onto blocks and threads -----------------------------------===//

static uint64_t bytesOf(MemRefType type) {
  uint64_t bits = type.getElementTypeBitWidth();
  return type.getNumElements() * ((bits + 7) / 8);
}

/// Temporaries become trailing arguments: the runtime passes scratch.
static std::vector<uint64_t> allocsToArguments(func::FuncOp func) {
  std::vector<uint64_t> scratch;
  SmallVector<Operation *> erase;
  for (Operation &op : func.getBody().front()) {
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      BlockArgument arg =
          func.getBody().front().addArgument(alloc.getType(), alloc.getLoc());
      alloc.getResult().replaceAllUsesWith(arg);
      scratch.push_back(bytesOf(alloc.getType()));
      erase.push_back(alloc);
    } else if (isa<memref::DeallocOp>(op)) {
      erase.push_back(&op);
    }
  }
  for (Operation *op : erase)
    op->erase();
  func.setType(FunctionType::get(func.getContext(),
                                 func.getBody().front().getArgumentTypes(),
                                 {}));
  return scratch;
}

static int64_t constantIndex(Value v) {
  APInt value;
  if (matchPattern(v, m_ConstantInt(&value)))
    return value.getSExtValue();
  return -1;
}

/// `loop` with its dimensions collapsed into one of `trips` iterations,
/// from 0 by 1 to a constant (the bounds collapsing computes with arith ops
/// the launch needs as constants); a single dimension keeps its own.
static FailureOr<scf::ParallelOp>
collapseToOneLoop(scf::ParallelOp loop, int64_t trips, RewriterBase &rewriter) {
  if (loop.getNumLoops() > 1) {
    Operation *next = loop->getNextNode();
    std::vector<unsigned> all;
    for (unsigned d = 0; d < loop.getNumLoops(); ++d)
      all.push_back(d);
    rewriter.setInsertionPoint(loop);
    collapseParallelLoops(rewriter, loop, {all});
    loop = dyn_cast_or_null<scf::ParallelOp>(next->getPrevNode());
    if (!loop)
      return failure();
  }
  if (constantIndex(loop.getUpperBound()[0]) < 0) {
    rewriter.setInsertionPoint(loop);
    Location loc = loop.getLoc();
    loop.getLowerBoundMutable().assign(
        arith::ConstantIndexOp::create(rewriter, loc, 0));
    loop.getUpperBoundMutable().assign(
        arith::ConstantIndexOp::create(rewriter, loc, trips));
    loop.getStepMutable().assign(
        arith::ConstantIndexOp::create(rewriter, loc, 1));
  }
  return loop;
}

/// Puts the iterations of `blocks` on block_x and those of `threads` on
/// thread_x.
static LogicalResult mapOntoBlocksAndThreads(scf::ParallelOp blocks,
                                             scf::ParallelOp threads) {
  MLIRContext *ctx = blocks.getContext();
  AffineMap id = AffineMap::getMultiDimIdentityMap(1, ctx);
  auto dim = [&](gpu::Processor p) {
    return gpu::ParallelLoopDimMappingAttr::get(ctx, p, id, id);
  };
  if (failed(gpu::setMappingAttr(blocks, {dim(gpu::Processor::BlockX)})) ||
      failed(gpu::setMappingAttr(threads, {dim(gpu::Processor::ThreadX)})))
    return blocks.emitError("internal error: invalid gpu mapping");
  return success();
}

/// Maps one top-level loop: collapse, tile, put tiles on blocks.
static LogicalResult mapLoop(scf::ParallelOp loop, int64_t threadsPerBlock,
                             RewriterBase &rewriter) {
  // Iterations of every dimension, from the constant bounds linalg wrote.
  int64_t trips = 1;
  for (unsigned d = 0; d < loop.getNumLoops(); ++d) {
    int64_t lb = constantIndex(loop.getLowerBound()[d]);
    int64_t ub = constantIndex(loop.getUpperBound()[d]);
    int64_t step = constantIndex(loop.getStep()[d]);
    if (lb < 0 || ub < 0 || step <= 0)
      return loop.emitError("internal error: expected a parallel loop of "
                            "constant bounds");
    trips *= ub > lb ? (ub - lb + step - 1) / step : 0;
  }
  if (trips == 0) {
    loop.erase();
    return success();
  }
  FailureOr<scf::ParallelOp> collapsed =
      collapseToOneLoop(loop, trips, rewriter);
  if (failed(collapsed))
    return failure();
  int64_t tile = std::max<int64_t>(1, std::min(threadsPerBlock, trips));
  auto [outer, inner] =
      scf::tileParallelLoop(*collapsed, {tile}, /*noMinMaxBounds=*/true);
  return mapOntoBlocksAndThreads(outer, inner);
}

/// The gpu.all_reduce kind of an scf.reduce combiner that is one add or
/// NaN-keeping maximum of its two arguments.
static std::optional<gpu::AllReduceOperation> combinerKind(Block &combiner) {
  auto ops = combiner.without_terminator();
  if (std::distance(ops.begin(), ops.end()) != 1)
    return std::nullopt;
  Operation &op = *ops.begin();
  auto ret = dyn_cast<scf::ReduceReturnOp>(combiner.getTerminator());
  if (!ret || ret.getResult() != op.getResult(0) ||
      !llvm::is_contained(op.getOperands(), combiner.getArgument(0)) ||
      !llvm::is_contained(op.getOperands(), combiner.getArgument(1)))
    return std::nullopt;
  if (isa<arith::AddFOp>(op))
    return gpu::AllReduceOperation::ADD;
  if (isa<arith::MaximumFOp>(op))
    return gpu::AllReduceOperation::MAXIMUMF;
  return std::nullopt;
}

/// Maps the row loop of a region in the parallel row form: a block per
/// row (the row dimensions collapsed onto block_x), `threads` threads
/// sharing its columns (about four each, whole warps, at most
/// `maxThreads`). Every op of a row runs on each of its threads (the
/// values per row are computed by all, alike); thread t owns columns t,
/// t + threads, ... (neighbouring threads read neighbouring elements); a
/// pass over the columns becomes a loop over the thread's columns, a row
/// buffer the thread's own columns, and a reduction the thread's partial
/// result, then a gpu.all_reduce of the block (every thread reaches it:
/// uniform), which gives each thread the row's value.
static LogicalResult mapRowLoop(scf::ParallelOp rowLoop, int64_t maxThreads,
                                RewriterBase &rewriter) {
  MLIRContext *ctx = rowLoop.getContext();
  Location loc = rowLoop.getLoc();
  int64_t rows = 1, cols = -1;
  for (unsigned d = 0; d < rowLoop.getNumLoops(); ++d) {
    int64_t lb = constantIndex(rowLoop.getLowerBound()[d]);
    int64_t ub = constantIndex(rowLoop.getUpperBound()[d]);
    int64_t step = constantIndex(rowLoop.getStep()[d]);
    if (lb != 0 || ub < 0 || step != 1)
      return rowLoop.emitError("internal error: expected a row loop from 0 "
                               "by 1 to a constant");
    rows *= ub;
  }
  SmallVector<scf::ParallelOp> columnLoops(
      rowLoop.getBody()->getOps<scf::ParallelOp>());
  for (scf::ParallelOp c : columnLoops) {
    int64_t n = c.getNumLoops() == 1 ? constantIndex(c.getUpperBound()[0]) : -1;
    if (n < 1 || constantIndex(c.getLowerBound()[0]) != 0 ||
        constantIndex(c.getStep()[0]) != 1 || (cols >= 0 && n != cols))
      return c.emitError("internal error: expected the row's column loops "
                         "from 0 by 1 to one constant");
    cols = n;
  }
  if (rows == 0) {
    rowLoop.erase();
    return success();
  }
  const int64_t threads = std::min<int64_t>(
      maxThreads, std::max<int64_t>(32, llvm::PowerOf2Ceil((cols + 3) / 4)));
  const int64_t perThread = (cols + threads - 1) / threads;

  // One dimension of rows, from 0 by 1 to a constant.
  FailureOr<scf::ParallelOp> collapsed =
      collapseToOneLoop(rowLoop, rows, rewriter);
  if (failed(collapsed))
    return failure();
  rowLoop = *collapsed;
  rewriter.setInsertionPoint(rowLoop);
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  Value threadCount = arith::ConstantIndexOp::create(rewriter, loc, threads);
  Value perThreadCount =
      arith::ConstantIndexOp::create(rewriter, loc, perThread);

  // The row's ops move into the loop over its threads.
  Block *rowBody = rowLoop.getBody();
  rewriter.setInsertionPointToStart(rowBody);
  auto threadLoop =
      scf::ParallelOp::create(rewriter, loc, ValueRange{zero},
                              ValueRange{threadCount}, ValueRange{one});
  Operation *threadEnd = threadLoop.getBody()->getTerminator();
  for (Operation &op : llvm::make_early_inc_range(
           llvm::make_range(std::next(threadLoop->getIterator()),
                            rowBody->getTerminator()->getIterator())))
    op.moveBefore(threadEnd);
  Value thread = threadLoop.getInductionVars().front();

  // Row buffers: the thread's own columns, its k-th at k.
  IRMapping owned;
  SmallVector<memref::AllocaOp> rowBuffers(
      threadLoop.getBody()->getOps<memref::AllocaOp>());
  for (memref::AllocaOp alloca : rowBuffers) {
    MemRefType type = alloca.getType();
    if (type.getRank() != 1 || type.getDimSize(0) != cols)
      return alloca.emitError("internal error: expected a row buffer of one "
                              "row");
    rewriter.setInsertionPoint(alloca);
    owned.map(alloca.getResult(),
              memref::AllocaOp::create(
                  rewriter, loc,
                  MemRefType::get({perThread}, type.getElementType())));
  }

  // Passes and reductions: loops over the thread's columns, the k-th
  // column t + k * threads (constant trips, so that the code generator
  // unrolls them and keeps the row buffers in registers; the last guarded
  // when the threads do not divide the row).
  const bool guarded = cols % threads != 0;
  for (scf::ParallelOp c : columnLoops) {
    Block *body = c.getBody();
    auto reduce = cast<scf::ReduceOp>(body->getTerminator());
    SmallVector<gpu::AllReduceOperation> kinds;
    for (Region &r : reduce.getReductions()) {
      std::optional<gpu::AllReduceOperation> kind = combinerKind(r.front());
      if (!kind)
        return reduce.emitError("internal error: expected a reduction that "
                                "adds or takes the maximum (arith.maximumf)");
      kinds.push_back(*kind);
    }
    // One column's ops, then each reduction's step; the carried values
    // next.
    auto columnStep = [&](OpBuilder &ob, Value k, Value col,
                          ValueRange carried) -> SmallVector<Value> {
      IRMapping map = owned;
      map.map(body->getArgument(0), col);
      for (Operation &op : body->without_terminator()) {
        Operation *copy = ob.clone(op, map);
        if (auto load = dyn_cast<memref::LoadOp>(copy);
            load && load.getMemRef().getDefiningOp<memref::AllocaOp>())
          load.getIndicesMutable()[0].set(k);
        if (auto store = dyn_cast<memref::StoreOp>(copy);
            store && store.getMemRef().getDefiningOp<memref::AllocaOp>())
          store.getIndicesMutable()[0].set(k);
      }
      SmallVector<Value> next;
      for (auto [i, region] : llvm::enumerate(reduce.getReductions())) {
        Block &combiner = region.front();
        IRMapping step;
        step.map(combiner.getArgument(0), carried[i]);
        step.map(combiner.getArgument(1),
                 map.lookupOrDefault(reduce.getOperands()[i]));
        for (Operation &op : combiner.without_terminator())
          ob.clone(op, step);
        next.push_back(step.lookupOrDefault(
            cast<scf::ReduceReturnOp>(combiner.getTerminator()).getResult()));
      }
      return next;
    };
    rewriter.setInsertionPoint(c);
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, perThreadCount, one, c.getInitVals(),
        [&](OpBuilder &fb, Location, Value k, ValueRange carried) {
          Value col = arith::AddIOp::create(
              fb, loc, thread, arith::MulIOp::create(fb, loc, k, threadCount));
          if (!guarded) {
            scf::YieldOp::create(fb, loc, columnStep(fb, k, col, carried));
            return;
          }
          Value inRow = arith::CmpIOp::create(
              fb, loc, arith::CmpIPredicate::ult, col, c.getUpperBound()[0]);
          auto ifOp = scf::IfOp::create(
              fb, loc, inRow,
              [&](OpBuilder &tb, Location) {
                scf::YieldOp::create(tb, loc, columnStep(tb, k, col, carried));
              },
              [&](OpBuilder &eb, Location) {
                scf::YieldOp::create(eb, loc, carried);
              });
          scf::YieldOp::create(fb, loc, ifOp.getResults());
        });
    SmallVector<Value> results;
    for (auto [partial, kind] : llvm::zip_equal(loop.getResults(), kinds))
      results.push_back(gpu::AllReduceOp::create(
          rewriter, loc, partial, gpu::AllReduceOperationAttr::get(ctx, kind),
          rewriter.getUnitAttr()));
    rewriter.replaceOp(c, results);
  }
  for (memref::AllocaOp alloca : rowBuffers) {
    if (!alloca->use_empty())
      return alloca.emitError("internal error: a row buffer is used outside "
                              "the passes over the columns");
    rewriter.eraseOp(alloca);
  }
  return mapOntoBlocksAndThreads(rowLoop, threadLoop);
}

/// Runs of top-level ops that are not parallel loops (sequential loops of
/// reductions over every dimension, the inlined body of a rank-0 op) go
/// into a one-iteration parallel loop: one thread runs them.
static void wrapSequentialRuns(func::FuncOp func, RewriterBase &rewriter) {
  Block &body = func.getBody().front();
  // Constants first, so that no run defines a value used after it.
  for (Operation &op : llvm::make_early_inc_range(body))
    if (isa<arith::ConstantOp>(op))
      op.moveBefore(&body, body.begin());
  SmallVector<SmallVector<Operation *>> runs(1);
  for (Operation &op : body) {
    if (isa<scf::ParallelOp, arith::ConstantOp, func::ReturnOp>(op)) {
      if (!runs.back().empty())
        runs.emplace_back();
      continue;
    }
    runs.back().push_back(&op);
  }
  for (ArrayRef<Operation *> run : runs) {
    if (run.empty())
      continue;
    rewriter.setInsertionPoint(run.front());
    Location loc = run.front()->getLoc();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    auto wrapper = scf::ParallelOp::create(rewriter, loc, ValueRange{zero},
                                           ValueRange{one}, ValueRange{one});
    Operation *terminator = wrapper.getBody()->getTerminator();
    for (Operation *op : run)
      op->moveBefore(terminator);
  }
}

FailureOr<std::vector<MappedRegion>>
mapRegionsToGpuLoops(ModuleOp module, const GpuCodegenOptions &options) {
  // The caller's context may know only the region functions' dialects (the
  // compiler's does): register and load what mapping and lowering create.
  {
    DialectRegistry registry;
    registerGpuCodegenDialects(registry);
    module.getContext()->appendDialectRegistry(registry);
    module.getContext()->loadAllAvailableDialects();
  }
  if (options.threadsPerBlock < 1 || options.threadsPerBlock > 1024)
    return module.emitError() << "expected 1..1024 threads per block, got "
                              << options.threadsPerBlock;
  std::vector<MappedRegion> regions;
  SmallVector<func::FuncOp> funcs;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isDeclaration() && func.isPublic())
      funcs.push_back(func);
  if (funcs.empty())
    return module.emitError() << "expected at least one fused region "
                                 "(a public func.func), got none";
  for (func::FuncOp func : funcs) {
    if (failed(checkRegion(func)))
      return failure();
    MappedRegion region;
    region.symbol = func.getSymName().str();
    region.numBuffers = func.getNumArguments();
    region.scratchBytes = allocsToArguments(func);
    regions.push_back(std::move(region));
  }

  // Parallel dimensions outermost (a reduction over rows becomes one thread
  // per column), so that each op's parallel loop is at the top.
  IRRewriter interchanger(module.getContext());
  for (func::FuncOp func : funcs) {
    SmallVector<linalg::GenericOp> generics(
        func.getBody().front().getOps<linalg::GenericOp>());
    for (linalg::GenericOp generic : generics) {
      SmallVector<unsigned> order;
      for (auto [d, type] : llvm::enumerate(generic.getIteratorTypesArray()))
        if (type == utils::IteratorType::parallel)
          order.push_back(d);
      for (auto [d, type] : llvm::enumerate(generic.getIteratorTypesArray()))
        if (type != utils::IteratorType::parallel)
          order.push_back(d);
      if (llvm::equal(order, llvm::seq<unsigned>(0, order.size())))
        continue;
      interchanger.setInsertionPoint(generic);
      if (failed(linalg::interchangeGenericOp(interchanger, generic, order)))
        return generic.emitError("internal error: cannot move the parallel "
                                 "dimensions outermost");
    }
  }

  // (Not the parallel row form's functions: the canonicalizer would fold
  // a row loop of one row away.)
  PassManager pm(module.getContext(), func::FuncOp::getOperationName());
  pm.addPass(createConvertLinalgToParallelLoopsPass());
  pm.addPass(createCanonicalizerPass());
  for (func::FuncOp func : funcs)
    if (!hasRowLoop(func) && failed(pm.run(func)))
      return failure();

  IRRewriter rewriter(module.getContext());
  for (func::FuncOp func : funcs) {
    wrapSequentialRuns(func, rewriter);
    SmallVector<scf::ParallelOp> loops(
        func.getBody().front().getOps<scf::ParallelOp>());
    for (scf::ParallelOp loop : loops)
      if (failed(isRowLoop(loop)
                     ? mapRowLoop(loop, options.threadsPerBlock, rewriter)
                     : mapLoop(loop, options.threadsPerBlock, rewriter)))
        return failure();
  }
  // CSE only: the canonicalizer would fold a one-tile block loop away, and
  // with it the loop's mapping.
  PassManager cleanup(module.getContext());
  cleanup.addNestedPass<func::FuncOp>(createCSEPass());
  if (failed(cleanup.run(module)))
    return failure();
  return regions;
}

//===-- From mapped loops to PTX ------------------------------------------===//

/// Constants used by a launch's body are copied into it, so that a kernel's
/// parameters are the region's buffers only (one pointer each).
static void sinkConstantsIntoLaunches(ModuleOp module) {
  module.walk([](gpu::LaunchOp launch) {
    Region &body = launch.getBody();
    SetVector<Value> above;
    getUsedValuesDefinedAbove(body, above);
    OpBuilder builder(&body.front(), body.front().begin());
    for (Value value : above) {
      Operation *def = value.getDefiningOp();
      if (!def || !isa<arith::ConstantOp>(def))
        continue;
      Operation *copy = builder.clone(*def);
      replaceAllUsesInRegionWith(value, copy->getResult(0), body);
    }
  });
}

/// f32 square roots round to nearest, as nvcc's default (-prec-sqrt=true)
/// and the CPU: libdevice's __nv_sqrtf would give sqrt.approx (its
/// __CUDA_PREC_SQRT reflection defaults to 0).
static void roundSquareRoots(ModuleOp module) {
  module.walk([](math::SqrtOp sqrt) {
    if (!sqrt.getType().isF32() || !sqrt->getParentOfType<gpu::GPUModuleOp>())
      return;
    OpBuilder builder(sqrt);
    auto call = LLVM::CallIntrinsicOp::create(
        builder, sqrt.getLoc(), sqrt.getType(),
        builder.getStringAttr("llvm.nvvm.sqrt.rn.f"), sqrt.getOperand());
    sqrt.replaceAllUsesWith(call.getResult(0));
    sqrt.erase();
  });
}

/// Moves every outlined kernel into one gpu.module (one PTX per
/// architecture), naming each function as its outlined module was (unique).
static void mergeKernelModules(ModuleOp module) {
  OpBuilder builder(module.getContext());
  builder.setInsertionPointToEnd(module.getBody());
  auto merged =
      gpu::GPUModuleOp::create(builder, module.getLoc(), kKernelModuleName);
  SymbolTable mergedTable(merged);
  DenseMap<StringAttr, StringAttr> renamed;
  for (auto kernelModule :
       llvm::make_early_inc_range(module.getOps<gpu::GPUModuleOp>())) {
    if (kernelModule == merged)
      continue;
    for (auto kernel :
         llvm::make_early_inc_range(kernelModule.getOps<gpu::GPUFuncOp>())) {
      kernel->moveBefore(merged.getBody(), merged.getBody()->end());
      kernel.setName(kernelModule.getName());
    }
    kernelModule.erase();
  }
  module.walk([&](gpu::LaunchFuncOp launch) {
    StringAttr moduleName = launch.getKernelModuleName();
    launch.setKernelAttr(SymbolRefAttr::get(
        builder.getStringAttr(kKernelModuleName),
        {FlatSymbolRefAttr::get(moduleName)}));
  });
}

static FailureOr<runtime::GpuKernelLaunch>
recordLaunch(gpu::LaunchFuncOp launch, func::FuncOp func) {
  runtime::GpuKernelLaunch out;
  out.kernel = launch.getKernelName().str();
  gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
  gpu::KernelDim3 block = launch.getBlockSizeOperandValues();
  Value dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
  for (int d = 0; d < 6; ++d) {
    int64_t v = constantIndex(dims[d]);
    if (v < 1 || v > 0x7fffffff)
      return launch.emitError("internal error: expected a constant launch "
                              "size in 1..2^31-1");
    (d < 3 ? out.grid[d] : out.block[d - 3]) = static_cast<uint32_t>(v);
  }
  if (Value shared = launch.getDynamicSharedMemorySize()) {
    int64_t v = constantIndex(shared);
    if (v < 0)
      return launch.emitError("internal error: expected constant shared "
                              "memory");
    out.sharedBytes = static_cast<uint32_t>(v);
  }
  for (Value operand : launch.getKernelOperands()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &func.getBody().front() ||
        !isa<MemRefType>(arg.getType()))
      return launch.emitError("internal error: kernel parameter is not one of "
                              "the region's buffers: ")
             << operand;
    out.params.push_back(arg.getArgNumber());
  }
  return out;
}

FailureOr<std::string> assembleWithPtxas(StringRef ptxasPath, StringRef ptx,
                                         StringRef chip, Location loc) {
  SmallString<128> ptxFile, cubinFile, logFile;
  if (llvm::sys::fs::createTemporaryFile("dtcc-kernels", "ptx", ptxFile) ||
      llvm::sys::fs::createTemporaryFile("dtcc-kernels", "cubin", cubinFile) ||
      llvm::sys::fs::createTemporaryFile("dtcc-ptxas", "log", logFile))
    return emitError(loc, "cannot create temporary files for ptxas");
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(ptxFile);
    llvm::sys::fs::remove(cubinFile);
    llvm::sys::fs::remove(logFile);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(ptxFile, ec);
    if (ec)
      return emitError(loc) << "cannot write " << ptxFile << ": "
                            << ec.message();
    os << ptx;
  }
  std::string arch = ("-arch=" + chip).str();
  SmallVector<StringRef> args{ptxasPath, arch, "-O3", ptxFile, "-o",
                              cubinFile};
  std::optional<StringRef> redirects[] = {std::nullopt, logFile, logFile};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(ptxasPath, args, std::nullopt, redirects,
                                     /*SecondsToWait=*/120, 0, &error);
  auto log = llvm::MemoryBuffer::getFile(logFile);
  StringRef logText = log ? (*log)->getBuffer().trim() : "";
  if (rc != 0)
    return emitError(loc) << "ptxas (" << ptxasPath << ") rejected the PTX for "
                          << chip << " (exit " << rc << (error.empty() ? "" : ": ")
                          << error << "): " << logText;
  auto cubin = llvm::MemoryBuffer::getFile(cubinFile, /*IsText=*/false);
  if (!cubin || (*cubin)->getBufferSize() == 0)
    return emitError(loc) << "ptxas wrote no cubin for " << chip;
  return (*cubin)->getBuffer().str();
}

FailureOr<runtime::GpuKernelModule>
generateGpuKernels(ModuleOp module, const GpuCodegenOptions &options) {
  if (!options.cudaToolkitDir.empty()) {
    std::string libdevice =
        options.cudaToolkitDir + "/nvvm/libdevice/libdevice.10.bc";
    if (!llvm::sys::fs::exists(libdevice))
      return module.emitError()
             << "GPU code generation links libdevice (the CUDA toolkit's "
                "math functions), but there is no "
             << libdevice;
  }
  FailureOr<std::vector<MappedRegion>> mapped =
      mapRegionsToGpuLoops(module, options);
  if (failed(mapped))
    return failure();
  MLIRContext *ctx = module.getContext();

  // Loops to launches, launches to kernels.
  {
    PassManager pm(ctx);
    pm.addPass(createConvertParallelLoopToGpuPass());
    pm.addNestedPass<func::FuncOp>(createCanonicalizerPass());
    if (failed(pm.run(module)))
      return failure();
    sinkConstantsIntoLaunches(module);
    PassManager outline(ctx);
    outline.addPass(createGpuKernelOutliningPass());
    if (failed(outline.run(module)))
      return failure();
  }
  mergeKernelModules(module);
  roundSquareRoots(module);

  runtime::GpuKernelModule result;
  for (const MappedRegion &region : *mapped) {
    auto func = module.lookupSymbol<func::FuncOp>(region.symbol);
    runtime::GpuFusedRegion out;
    out.symbol = region.symbol;
    out.numBuffers = region.numBuffers;
    out.scratchBytes = region.scratchBytes;
    WalkResult walk = func.walk([&](gpu::LaunchFuncOp launch) {
      FailureOr<runtime::GpuKernelLaunch> recorded =
          recordLaunch(launch, func);
      if (failed(recorded))
        return WalkResult::interrupt();
      out.launches.push_back(std::move(*recorded));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    if (func.walk([](Operation *op) {
              return isa<gpu::LaunchFuncOp, func::ReturnOp, arith::ConstantOp,
                         func::FuncOp>(op)
                         ? WalkResult::advance()
                         : WalkResult::interrupt();
            })
            .wasInterrupted())
      return func.emitError("internal error: host code left beside the "
                            "kernel launches");
    runtime::Status status = runtime::checkGpuRegion(out);
    if (!status.isOk())
      return func.emitError("internal error: ") << status.message();
    result.regions.push_back(std::move(out));
  }

  // Kernels to NVVM, NVVM to PTX with LLVM's NVPTX backend.
  {
    PassManager pm(ctx);
    for (const std::string &chip : options.chips) {
      GpuNVVMAttachTargetOptions target;
      target.chip = chip;
      target.features = options.ptxFeatures;
      target.optLevel = 3;
      pm.addPass(createGpuNVVMAttachTarget(target));
    }
    OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
    kernels.addPass(createLowerAffinePass());
    kernels.addPass(createSCFToControlFlowPass());
    ConvertGpuOpsToNVVMOpsOptions nvvm;
    nvvm.useBarePtrCallConv = true;
    kernels.addPass(createConvertGpuOpsToNVVMOps(nvvm));
    kernels.addPass(createCanonicalizerPass());
    kernels.addPass(createCSEPass());
    kernels.addPass(createReconcileUnrealizedCastsPass());
    GpuModuleToBinaryPassOptions binary;
    binary.compilationTarget = "isa";
    binary.toolkitPath = options.cudaToolkitDir;
    pm.addPass(createGpuModuleToBinaryPass(binary));
    if (failed(pm.run(module)))
      return failure();
  }

  auto binaryOp = module.lookupSymbol<gpu::BinaryOp>(kKernelModuleName);
  if (!binaryOp)
    return module.emitError("internal error: no gpu.binary was produced");
  for (Attribute attr : binaryOp.getObjects()) {
    auto object = cast<gpu::ObjectAttr>(attr);
    auto target = dyn_cast<NVVM::NVVMTargetAttr>(object.getTarget());
    if (!target)
      return binaryOp.emitError("internal error: expected NVVM objects");
    runtime::GpuKernelImage image;
    image.chip = target.getChip().str();
    image.ptx = object.getObject().str();
    if (image.ptx.find(".entry") == std::string::npos)
      return binaryOp.emitError("internal error: PTX for ")
             << image.chip << " has no kernel entry";
    // A math function libdevice did not define (no toolkit was found).
    size_t extern_ = image.ptx.find(".extern .func");
    if (extern_ != std::string::npos) {
      size_t end = image.ptx.find('(', extern_);
      return binaryOp.emitError("the PTX for ")
             << image.chip << " calls an undefined function ("
             << image.ptx.substr(extern_, end - extern_)
             << "): libdevice defines the math functions, but no CUDA "
                "toolkit was found ('"
             << options.cudaToolkitDir << "')";
    }
    if (!options.ptxasPath.empty()) {
      FailureOr<std::string> cubin = assembleWithPtxas(
          options.ptxasPath, image.ptx, image.chip, binaryOp.getLoc());
      if (failed(cubin))
        return failure();
      image.cubin = std::move(*cubin);
    }
    result.images.push_back(std::move(image));
  }
  return result;
}

} // namespace dtcc::codegen
