//===- ShardAttrs.td - mesh and sharding attributes --------*- tablegen -*-===//

#ifndef DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD
#define DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD

include "dialects/Shard/IR/ShardDialect.td"
include "mlir/IR/EnumAttr.td"

def Shard_MeshAttr : Shard_Attr<"Mesh", "mesh"> {
  let summary = "A device mesh: named axes and their sizes";
  let description = [{
    Example: `#dshard.mesh<[dp = 2, pp = 1, tp = 4]>` (8 ranks; rank
    `r = (dp * 1 + pp) * 4 + tp`).
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        ArrayRefParameter<"int64_t">:$sizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The size of `axis`; 1 for an axis the mesh does not have.
    int64_t getSize(::llvm::StringRef axis) const;
    int64_t getNumRanks() const;
  }];
}

def Shard_DimShardingAttr : Shard_Attr<"DimSharding", "dim"> {
  let summary = "How one tensor dimension is split";
  let description = [{
    The mesh axes that split the dimension, major to minor, and the number
    of equal groups the dimension is viewed as (each group is split the
    same way). Printed inside a sharding as `{tp}`, `{dp, tp}` or `{tp}x3`.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        DefaultValuedParameter<"int64_t", "1">:$groups);
  let assemblyFormat = "`<` `[` $axes `]` (`,` $groups^)? `>`";
}

def Shard_ShardingAttr : Shard_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is laid out over a mesh";
  let description = [{
    One entry per dimension, and the axes over which the tensor is a
    partial sum. Example: `#dshard.sharding<[{dp}, {}, {tp}x3], partial =
    {}>`: dimension 0 split over dp, dimension 2 viewed as 3 blocks each
    split over tp. An axis may appear once at most.
  }];
  let parameters = (ins ArrayRefParameter<"DimShardingAttr">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr">:$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Fully replicated over a tensor of `rank` dimensions.
    static ShardingAttr replicated(::mlir::MLIRContext *ctx, int64_t rank);
    bool isReplicated() const;
    bool isPartial() const { return !getPartial().empty(); }
    /// The axes that split dimension `d`.
    ::llvm::ArrayRef<::mlir::StringAttr> axesOf(int64_t d) const {
      return getDims()[d].getAxes();
    }
    /// Every axis the sharding uses, in dims then partial.
    ::llvm::SmallVector<::mlir::StringAttr> usedAxes() const;
    /// The local shape of `global` under this sharding on `mesh`, or
    /// failure when a dimension does not divide (with a reason).
    ::mlir::FailureOr<::llvm::SmallVector<int64_t>>
    localShape(::llvm::ArrayRef<int64_t> global, MeshAttr mesh,
               std::string *why = nullptr) const;
    /// The same sharding without partial axes.
    ShardingAttr withoutPartial() const;
  }];
}


def Shard_PipelineSchedule : I32EnumAttr<"PipelineSchedule",
    "the order a pipeline stage runs its micro-batches in", [
      I32EnumAttrCase<"GPipe", 0, "gpipe">,
      I32EnumAttrCase<"OneFOneB", 1, "1f1b">,
      I32EnumAttrCase<"Interleaved", 2, "interleaved">,
      I32EnumAttrCase<"ZeroBubbleH1", 3, "zb-h1">]> {
  let cppNamespace = "::dtcc::shard";
  let genSpecializedAttr = 0;
}

def Shard_Recompute : I32EnumAttr<"Recompute",
    "which forward activations the backward pass recomputes", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"Full", 1, "full">,
      I32EnumAttrCase<"Selective", 2, "selective">]> {
  let cppNamespace = "::dtcc::shard";
  let genSpecializedAttr = 0;
}

def Shard_Offload : I32EnumAttr<"Offload",
    "which training state lives in host memory instead of the device", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"Optimizer", 1, "optimizer">]> {
  let cppNamespace = "::dtcc::shard";
  let genSpecializedAttr = 0;
}

def Shard_PlanAttr : Shard_Attr<"Plan", "plan"> {
  let summary = "A training step's distribution plan: every decision, once";
  let description = [{
    The decisions a planning pass (passes/Planning: dtcc-plan-set,
    dtcc-plan-search-layouts) takes for a training step, on the module as
    `dshard.plan`; the passes that build the step read them from here and
    from nowhere else:

    - `mesh`: the device mesh, axes in rank order (the last fastest), as
      `#dshard.mesh` (`[]`: one device). dtcc knows `dp` (data), `pp`
      (pipeline stages), `tp` (tensor parallel) and `cp` (context
      parallel: the sequence split, attention as a ring).
    - `zero`: the ZeRO stage over `dp`, 0 to 3.
    - `micro_batches`: micro-batches per optimizer step, >= 1. Without
      `pp` they are successive `@train_step` calls whose gradients
      accumulate; with `pp` they are unrolled inside the step.
    - `schedule`: the pipeline's order: `gpipe`, `"1f1b"`, `interleaved`
      (interleaved 1F1B over `virtual_stages` layer chunks per rank) or
      `"zb-h1"` (zero bubble, backward split into input- and
      weight-gradient parts).
    - `virtual_stages` (default 1): layer chunks per pipeline rank; more
      than 1 only with `interleaved`.
    - `recompute`: the activations the backward pass recomputes: `none`,
      `selective` (the attention core: scores, softmax, dropout, the
      product with V) or `full` (everything but each layer's input).
    - `recompute_layers` (default 0, every layer): with `full`, only the
      first K layers of each pipeline stage recompute.
    - `sequence_parallel` (default false): with `tp`, the activations
      outside the tensor-parallel matmuls are split along the sequence.
    - `offload`: `none` or `optimizer` (optimizer state in host memory,
      its step run by the host).
    - `grad_reduce` (default `fp32`): the type the data- and
      context-parallel sums of weight gradients travel in under mixed
      precision. `fp32`: the gradient is widened to the fp32 master
      gradient first (FSDP's reduce_dtype float32, Megatron-LM's default);
      `half`: it is summed at the compute type (bf16, fp16) and widened
      after, half the bytes (FSDP's reduce_dtype = param_dtype, Composer's
      PURE). With more than one micro-batch only under ZeRO-2 or 3 and
      without pipeline stages (each micro-batch's gradient is then
      reduce-scattered into its split accumulator); other accumulated
      micro-batches are summed once per step, in fp32.
    - `layouts` (optional): per variable, a tensor-parallel layout that
      replaces the Megatron-style choice: `rows`, `cols` or `whole` for a
      2-D weight, or the exact `#dshard.sharding` a layout search chose.

    Example:
    `#dshard.plan<mesh = [dp = 2, tp = 2], zero = 1, micro_batches = 2,
    schedule = "1f1b", recompute = none, layouts = {fc1 = cols, fc2 =
    #dshard.sharding<[{tp}, {} ]>}>`

    Fields at their default are not printed (but for the first five).

    **Constraints:** mesh axes named `dp`, `pp`, `tp` or `cp` (context
    parallel), each once, of size >= 1; `zero` in 0..3; `micro_batches` >=
    1; `virtual_stages` >= 1, more than 1 only with `interleaved`;
    `recompute_layers` >= 0, more than 0 only with `full`; `grad_reduce =
    half` with more than one micro-batch only with `zero` >= 2 and no
    `pp`; a layout names a
    variable and is `rows`, `cols`, `whole` or a `#dshard.sharding` of mesh
    axes.
  }];
  let parameters = (ins "MeshAttr":$mesh, "int64_t":$zero,
                        "int64_t":$microBatches,
                        "PipelineSchedule":$schedule,
                        "int64_t":$virtualStages,
                        "Recompute":$recompute,
                        "int64_t":$recomputeLayers,
                        "bool":$sequenceParallel,
                        "Offload":$offload,
                        "bool":$halfGradReduce,
                        "::mlir::DictionaryAttr":$layouts);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Pipeline stages: the mesh's pp (1 without).
    int64_t getPipelineStages() const { return getMesh().getSize("pp"); }
    /// Micro-batches unrolled inside one @train_step (a pipeline's; 1
    /// without pp).
    int64_t getMicroBatchesInStep() const {
      return getPipelineStages() > 1 ? getMicroBatches() : 1;
    }
    /// @train_step calls per optimizer step, whose gradients accumulate
    /// (1 with pp, whose step holds its micro-batches).
    int64_t getAccumulationSteps() const {
      return getPipelineStages() > 1 ? 1 : getMicroBatches();
    }
    /// The layout chosen for variable `name`: a #dshard.sharding, a
    /// StringAttr rows, cols or whole, or null.
    ::mlir::Attribute getLayout(::llvm::StringRef name) const {
      return getLayouts() ? getLayouts().get(name) : ::mlir::Attribute();
    }
    /// The same plan with `layouts`.
    PlanAttr withLayouts(::mlir::DictionaryAttr layouts) const;
  }];
}

#endif // DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD
