//===- Passes.td - planning passes: the plan, the layout search -*- tablegen -*-===//
//
// Planning passes decide and write `dshard.plan` (and the constraints a
// layout search adds); they rewrite nothing else. The passes that build the
// step (passes/Graph, passes/Sharding, passes/Lowering) read the plan.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PASSES_PLANNING_PASSES_TD
#define DTCC_PASSES_PLANNING_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanSet : Pass<"dtcc-plan-set", "mlir::ModuleOp"> {
  let summary = "Writes an explicit plan (mesh, ZeRO, micro-batches, ...)";
  let description = [{
    Writes the module's `dshard.plan` from the options given: a plan a
    user wrote (`dtcc compile --mesh ... --zero ...`) or one a search
    chose. An option not given keeps the module's plan's value (the
    default when it has none), so that each compile phase sets the
    decisions it owns: `dtcc-phase-train` the recomputation and
    micro-batches, `dtcc-phase-shard` the mesh, ZeRO stage, schedule and
    layouts. Runs before dtcc-graph-autodiff (which reads the
    recomputation) or, for a step already trained, before the shard phase.

    The mesh is parsed once, here (runtime::MeshShape): axes in rank order,
    the last fastest, so `tp=2,dp=2` puts the dp replicas on neighbouring
    ranks.

    Example: `-dtcc-plan-set="mesh=dp=2,tp=2 zero=1 layouts=fc1=cols"`
    ```mlir
    module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2, tp = 2],
        zero = 1, micro_batches = 1, schedule = "1f1b", recompute = none,
        layouts = {fc1 = cols}>} { ... }
    ```

    Errors (at the module): a mesh that does not parse, an axis other than
    dp, pp, tp and cp, a ZeRO stage outside 0..3, micro-batches < 1, a
    schedule other than gpipe, 1f1b, interleaved and zb-h1, virtual stages
    without interleaved, recomputation other than none, selective and full,
    recompute layers without full, offload other than none and optimizer,
    grad-reduce other than fp32 and half, grad-reduce half with more than
    one micro-batch below ZeRO-2 or with pp, a layout that is not NAME=rows|cols|whole, and a variable the module
    does not have.
  }];
  let options = [
    Option<"mesh", "mesh", "std::string", "\"\"",
           "The mesh, axes in rank order, e.g. dp=2,tp=2 (empty: one "
           "device)">,
    Option<"zero", "zero", "int", "0", "ZeRO stage: 0, 1, 2 or 3">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per optimizer step">,
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "Pipeline schedule: gpipe, 1f1b, interleaved or zb-h1">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Layer chunks per pipeline rank (interleaved)">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "Activations recomputed in the backward pass: none, selective "
           "or full">,
    Option<"recomputeLayers", "recompute-layers", "int64_t", "0",
           "With full: only the first K layers of each stage (0: all)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "With tp: split the activations outside the matmuls along the "
           "sequence">,
    Option<"offload", "offload", "std::string", "\"none\"",
           "Training state in host memory: none or optimizer">,
    Option<"gradReduce", "grad-reduce", "std::string", "\"fp32\"",
           "Type the weight gradients are summed over dp and cp in under "
           "mixed precision: fp32 (widened first) or half (the compute "
           "type; with micro-batches only under ZeRO-2/3 without pp)">,
    ListOption<"layouts", "layouts", "std::string",
               "Tensor-parallel layouts that replace the Megatron-style "
               "choice: NAME=rows|cols|whole for 2-D weights">,
  ];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def PlanSearchLayouts : Pass<"dtcc-plan-search-layouts", "mlir::ModuleOp"> {
  let summary = "Chooses every op's tensor-parallel sharding by an ILP (CBC)";
  let description = [{
    A planning pass for models that are not standard transformers: runs
    after dtcc-graph-optimizer and before dtcc-shard-annotate, for a plan
    (`dshard.plan`, from dtcc-plan-set) whose mesh has `tp` > 1, and decides for every op of the training step
    (`@train_step`, and `@apply_step` with micro-batches) which factor of
    its sharding rule (ShardableOpInterface) the `tp` axis splits, or none,
    by solving one 0-1 integer program with CBC (Alpa's intra-op pass).

    The program: each op picks one strategy, each a factor taking `tp` on
    top of the data-parallel layout propagation gives it (the batch over
    `dp`), or a partial sum passed on where propagation passes one (ops
    linear in their partial operand, read by nothing else). Every variable
    picks one layout (whole, or `tp` on one dimension it divides); its
    loads yield it and its stores require it, and a parameter's optimizer
    state and gradient accumulator share it. Costs, in seconds from the
    device figures: a matmul's multiply-adds at `flops`; the bytes any
    other op reads and writes at `memory-bandwidth` (when given); each
    reshard between a value's layout and what a user requires, as
    dtcc-shard-partition will do it: a partial sum is reduce-scattered onto
    a dimension the user splits, else all-reduced; axes the user does not
    want are all-gathered; added axes are free slices; ring costs
    (all-reduce 2(n-1)/n of the bytes in 2(n-1) steps, all-gather and
    reduce-scatter (n-1)/n in n-1 steps, `latency` per step, `bandwidth`
    bytes/s, or the axis's own link: `tp-bandwidth` and `tp-latency` for
    groups inside a node, `dp-...` across nodes), paid once per value and
    target layout (the partitioner reuses a reshard); the vocab-parallel
    cross-entropy's own all-reduces. Ops of `@train_step` count once per
    micro-batch.

    An op runs the strategy propagation derives from its operands; the
    program holds that as rules, except that with `constraints` an op may
    take any strategy that propagation reproduces from its own required
    layouts, and its operands are then resharded into them by a
    `dshard.constraint` (a fixed point of propagation). What is decided is
    written as attributes only: every searched variable's layout into the
    plan's `layouts` (its exact `#dshard.sharding`, replicated for whole:
    dtcc-shard-annotate applies it and adds the batch and ZeRO splits) and
    the constraints, so dtcc-shard-propagate and dtcc-shard-partition then
    build exactly the program that was priced.

    When CBC finds no assignment within `time-limit` seconds the module is
    left unchanged (dtcc-shard-annotate's Megatron-style layouts apply)
    with a warning. `remarks` explains each layout, each constraint (the
    collectives it costs) and the modelled step beside the Megatron-style
    layouts' price.

    Not modelled: ZeRO (layouts are chosen for stage 0), matmul efficiency
    by size, kernel launch overheads, overlap of communication with
    computation, and a partial sum resharded to several layouts (priced as
    separate reshards; the partitioner slices the all-reduced one).

    Example (a plan with `mesh = [tp = 2]`): a 2-layer MLP with wide hidden layers, whose
    layers the search splits Megatron-style:
    ```mlir
    dgraph.variable @fc1 : tensor<64x256xf32> = ...
    dgraph.variable @fc2 : tensor<256x64xf32> = ...
    ```
    becomes
    ```mlir
    module attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], ...,
        layouts = {fc1 = #dshard.sharding<[{}, {tp} ]>,
                   fc2 = #dshard.sharding<[{tp}, {} ]>, ...}>}
    ```
    and a weight too small to gain from a split (4x4, a batch of 1024)
    stays whole while its product is split by rows of the batch, a layout
    propagation alone would not give its input:
    ```mlir
    layouts = {..., w = #dshard.sharding<[{}, {} ]>}
    %c = dshard.constraint %x, <[{tp}, {} ]> : tensor<1024x4xf32>
    %y = dgraph.matmul %c, %w : (tensor<1024x4xf32>, tensor<4x4xf32>) -> ...
    ```

    Errors: a module without a plan, a plan whose mesh has axes other than
    dp and tp, a module already placed on a mesh, no `@train_step`, pipeline stages,
    figures that are not positive, an op without a sharding rule.
  }];
  let options = [
    Option<"flops", "flops", "double", "1e11",
           "Sustained FLOP/s of matrix products">,
    Option<"memoryBandwidth", "memory-bandwidth", "double", "0",
           "Sustained bytes/s of ops other than matrix products (0: not "
           "priced)">,
    Option<"bandwidth", "bandwidth", "double", "1e9",
           "Bus bandwidth of a collective's ring, bytes/s">,
    Option<"latency", "latency", "double", "20e-6",
           "Seconds per ring step of a collective">,
    Option<"tpBandwidth", "tp-bandwidth", "double", "0",
           "Bus bandwidth of tp groups where they differ (inside a node); "
           "0: bandwidth">,
    Option<"tpLatency", "tp-latency", "double", "0",
           "Latency per ring step of tp groups; 0: latency">,
    Option<"dpBandwidth", "dp-bandwidth", "double", "0",
           "Bus bandwidth of dp groups (across nodes); 0: bandwidth">,
    Option<"dpLatency", "dp-latency", "double", "0",
           "Latency per ring step of dp groups; 0: latency">,
    Option<"timeLimit", "time-limit", "double", "30",
           "CBC's time limit, seconds">,
    Option<"constraints", "constraints", "bool", "true",
           "Allow dshard.constraint ops on activations (false: variables' "
           "layouts only)">,
    Option<"remarks", "remarks", "bool", "false",
           "Explain the decisions with remarks">,
  ];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}


#endif // DTCC_PASSES_PLANNING_PASSES_TD
