//===- Passes.td - sharding passes: annotate, propagate, partition -*- tablegen -*-===//

#ifndef DTCC_PASSES_SHARDING_PASSES_TD
#define DTCC_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ShardAnnotate : Pass<"dtcc-shard-annotate", "mlir::ModuleOp"> {
  let summary = "Places a training step on a device mesh: data, ZeRO state";
  let description = [{
    Runs after dtcc-graph-optimizer. Records the mesh as the module's
    `dshard.mesh` and annotates the plan's fixed points; propagation fills
    in everything else.

    - Every argument of `@train_step` (and `@apply_step`) is a batch of
      data: dimension 0 is split over `dp`. A batch that `dp` does not
      divide is an error naming the input.
    - `zero` >= 1 splits each optimizer state variable (the state operands
      of `dgraph.adamw` / `dgraph.sgd`) over `dp` along its first dimension
      that `dp` divides (a tensor with none stays replicated) and splits
      the gradient the same way where it meets the optimizer (a
      `dshard.constraint`), so the data-parallel sum becomes a
      reduce-scatter and the gradient norm a sum of per-rank norms;
      `zero` >= 2 also splits the gradient accumulators of micro-batching;
      `zero` = 3 also the parameters, which are then gathered where they
      are used. Tensor-parallel splits come first; ZeRO's dp split goes
      inside them. Variables split for ZeRO carry
      `dshard.zero`: propagation lets the batch split win over theirs.
    - `tp` > 1: Megatron-style tensor parallelism from the forward pass. A
      weight multiplying a whole activation is split by output columns
      (with its bias; a fused output sliced into equal parts, such as Q, K
      and V, part by part), which leaves the activations after it split; a
      weight multiplying a split activation is split by input rows, so its
      product is a partial sum that an all-reduce completes before the
      bias. Embedding tables are split by rows and the projection to the
      vocabulary by columns (Megatron's vocab-parallel embedding and
      cross-entropy). Convolutions split by output channels, then by input
      channels, the same way; a batch, group or instance norm of split
      channels splits its scale, bias and running statistics like them
      (whole groups per rank), so it runs on each rank's channels without
      communication. Optimizer state follows its parameter.
    - `@main` (inference) is removed: a sharded program trains.

    Errors: a mesh spec that does not parse, a module without
    `@train_step`, a batch that does not divide, zero outside 0..3.
  }];
  let options = [
    Option<"mesh", "mesh", "std::string", "\"\"", "The mesh, e.g. dp=2,tp=2">,
    Option<"zero", "zero", "int", "0", "ZeRO stage: 0, 1, 2 or 3">,
    ListOption<"layouts", "layouts", "std::string",
               "Tensor-parallel layouts that replace the Megatron-style "
               "choice: NAME=rows|cols|whole for 2-D weights">,
  ];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardSearchLayouts : Pass<"dtcc-shard-search-layouts", "mlir::ModuleOp"> {
  let summary = "Chooses every op's tensor-parallel sharding by an ILP (CBC)";
  let description = [{
    A planning pass for models that are not standard transformers: runs
    after dtcc-graph-optimizer and before dtcc-shard-annotate, for a mesh
    with `tp` > 1, and decides for every op of the training step
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
    written as attributes only: every searched variable's
    `dshard.sharding` (replicated for whole: dtcc-shard-annotate keeps it
    and adds the batch and ZeRO splits) and the constraints, so
    dtcc-shard-propagate and dtcc-shard-partition then build exactly the
    program that was priced.

    When CBC finds no assignment within `time-limit` seconds the module is
    left unchanged (dtcc-shard-annotate's Megatron-style layouts apply)
    with a warning. `remarks` explains each layout, each constraint (the
    collectives it costs) and the modelled step beside the Megatron-style
    layouts' price.

    Not modelled: ZeRO (layouts are chosen for stage 0), matmul efficiency
    by size, kernel launch overheads, overlap of communication with
    computation, and a partial sum resharded to several layouts (priced as
    separate reshards; the partitioner slices the all-reduced one).

    Example (`mesh=tp=2`): a 2-layer MLP with wide hidden layers, whose
    layers the search splits Megatron-style:
    ```mlir
    dgraph.variable @fc1 : tensor<64x256xf32> = ...
    dgraph.variable @fc2 : tensor<256x64xf32> = ...
    ```
    becomes
    ```mlir
    dgraph.variable @fc1 ... {dshard.sharding = #dshard.sharding<[{}, {tp} ]>, ...}
    dgraph.variable @fc2 ... {dshard.sharding = #dshard.sharding<[{tp}, {} ]>, ...}
    ```
    and a weight too small to gain from a split (4x4, a batch of 1024)
    stays whole while its product is split by rows of the batch, a layout
    propagation alone would not give its input:
    ```mlir
    dgraph.variable @w ... {dshard.sharding = #dshard.sharding<[{}, {} ]>, ...}
    %c = dshard.constraint %x, <[{tp}, {} ]> : tensor<1024x4xf32>
    %y = dgraph.matmul %c, %w : (tensor<1024x4xf32>, tensor<4x4xf32>) -> ...
    ```

    Errors: a mesh that does not parse or has axes other than dp and tp, a
    module already placed on a mesh, no `@train_step`, pipeline stages,
    figures that are not positive, an op without a sharding rule.
  }];
  let options = [
    Option<"mesh", "mesh", "std::string", "\"\"", "The mesh, e.g. dp=2,tp=2">,
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

def ShardPropagate : Pass<"dtcc-shard-propagate", "mlir::ModuleOp"> {
  let summary = "Chooses every op's sharding from its rule";
  let description = [{
    Walks each function of a module with a `dshard.mesh` in program order.
    An op's factors (ShardableOpInterface) take the mesh axes of its
    operands' shardings (the first operand dimension that splits a factor
    wins; the ZeRO split of a parameter only when nothing else uses the
    axis; replicated factors such as a softmax dimension never split);
    each operand is then required in the projection of those factors, and
    each result gets it, partial over the axes of split reduction factors
    (a contracted batch dimension makes a partial sum). Partial sums flow
    through ops linear in them (add and sub of equally partial values,
    mul, div by a non-partial value, reshapes, transposes, broadcasts,
    reduce_sum) and are resolved where they meet anything else.

    Loads take their variable's sharding and stores require it;
    `dshard.constraint` requires and yields its sharding; returns require
    replicated values; constants are replicated.

    Records `dshard.in_shardings` (one per operand) and `dshard.shardings`
    (one per result) on every op; dtcc-shard-partition reads them.

    Errors: an op without a sharding rule (named, at its ONNX node).
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardPartition : Pass<"dtcc-shard-partition", "mlir::ModuleOp"> {
  let summary = "Rewrites a propagated module into one rank's program";
  let description = [{
    Gives every value its local type (the global shape divided by its
    sharding) and inserts the communication where a value's sharding
    differs from the one its user requires, per mesh axis:
    - a partial sum becomes a `dshard.reduce_scatter` when the user wants
      that axis on a dimension, else a `dshard.all_reduce`;
    - an axis the user does not want is gathered (`dshard.all_gather`),
      innermost first;
    - an axis the user adds is a local `dshard.shard_slice` (a splat
      constant is rebuilt at the local shape instead).
    A value is resharded once per target and reused; a replicated version
    of a partial sum serves later sharded users by slicing it.

    Variables get their local type and keep their global initial value and
    `dshard.sharding` (the runtime takes its block of it); slice and pad
    bounds on split dimensions are divided by the split. A dropout on a
    split tensor gets its block's offsets (from `dshard.axis_index`) and
    the whole tensor's shape, so that it draws the mask one device would.

    Errors: a dimension the sharding does not divide (named, with the op);
    a dropout on a dimension split in groups (non-contiguous blocks).
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardMicrobatch : Pass<"dtcc-shard-microbatch", "mlir::ModuleOp"> {
  let summary = "Unrolls the training step over micro-batches";
  let description = [{
    Runs after dtcc-graph-autodiff, for pipeline parallelism. `@train_step`
    takes `micro-batches` times its batch along dimension 0 and computes the
    forward and backward pass once per micro-batch, on slices of its inputs;
    its loss and gradients are the means over the micro-batches (the same
    values as one pass over the whole batch). Each unrolled op carries its
    micro-batch (`dshard.micro`) and pass (`dshard.pass`, forward or
    backward) for dtcc-shard-pipeline. Ops that do not depend on the batch
    (parameter loads) are computed once.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step">,
  ];
}

def ShardPipeline : Pass<"dtcc-shard-pipeline", "mlir::ModuleOp"> {
  let summary = "Cuts the unrolled step into pipeline stages";
  let description = [{
    Runs after the optimizer on a step unrolled by dtcc-shard-microbatch and
    replaces `@train_step` by `@train_step_pp<k>`, one per stage; the
    runtime runs the one of its `pp` coordinate.

    Stages: the layers (each op's `#dgraph.layer` index: set by the ONNX
    importer from node names such as `layers.3/...`, or by
    dtcc-graph-mark-layers from the graph's structure; in a model without
    layers, such as a U-Net, its top-level modules, `#dgraph.layer`'s
    `module`), in the order the forward pass meets them, cut into `stages`
    contiguous runs that minimize the costliest stage (cost: a matmul's
    multiply-adds, the elements any other op writes, forward and backward;
    the embeddings count on the first stage, the head and loss on the
    last); ops outside layers go with their operands. Each op of the backward pass runs in the
    stage of its forward op.

    Order: each stage runs its micro-batch blocks in the schedule's order:
    `gpipe` all forwards then all backwards; `1f1b` (PipeDream-Flush) `S -
    k - 1` forwards on stage k, then one forward and one backward in turn,
    then the remaining backwards, so at most `S - k` micro-batches' activations
    are alive at once (the memory plan shows it). A value another stage reads
    is sent after it is made (`dshard.send`, asynchronous, tagged per value
    and destination) and received before its first reader there, and no
    later than anything its sender sends after it: each stage receives from
    every other in that stage's send order (NCCL matches the messages
    between two ranks by order, not by tag; the runtime checks it).

    The optimizer runs in the stage of each parameter; sums over parameters
    of several stages (the gradient norm) are partial over `pp` and
    completed by an all-reduce; every stage returns the whole loss,
    learning rate and gradient norm. Variables updated by one stage carry
    `dshard.stage`.

    Errors: fewer layers than stages; an op that combines values of several
    stages other than by a sum; a parameter read by a stage that does not
    update it (tied weights).
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "1", "Pipeline stages (pp)">,
    Option<"scheduleKind", "schedule", "std::string", "\"1f1b\"",
           "gpipe or 1f1b">,
  ];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardCombineAllReduces : Pass<"dtcc-shard-combine-all-reduces", "mlir::ModuleOp"> {
  let summary = "One all-reduce for a sum of all-reduced terms";
  let description = [{
    Runs on a partitioned module, before dtcc-shard-overlap. A sum (a tree
    of `dgraph.add` whose inner results have no other use) of which two or
    more terms are synchronous sum all-reduces over the same axis, used
    only there, becomes the sum of the other terms plus one all-reduce of
    the sum of those terms' operands, per axis. The gradient norm of a
    tensor-parallel step adds one partial squared norm per split parameter
    to a replicated total: one scalar all-reduce per parameter before, one
    per step after. The additions are reassociated (other terms first), so
    the sum may round differently.

    Example:
    ```mlir
    %a = dshard.all_reduce %p "tp" : tensor<f32>
    %s = dgraph.add %r, %a : tensor<f32>
    %b = dshard.all_reduce %q "tp" : tensor<f32>
    %t = dgraph.add %s, %b : tensor<f32>
    // becomes
    %pq = dgraph.add %p, %q : tensor<f32>
    %c = dshard.all_reduce %pq "tp" : tensor<f32>
    %t = dgraph.add %r, %c : tensor<f32>
    ```
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardOverlap : Pass<"dtcc-shard-overlap", "mlir::ModuleOp"> {
  let summary = "Overlaps communication with computation";
  let description = [{
    Runs on a partitioned module. Makes collectives asynchronous
    (`async = 1, handle = h`) with a `dshard.wait` just before the first use
    of their result, where that leaves computation in between:
    - gradient reductions of the backward pass (all-reduce, reduce-scatter)
      run while the backward pass goes on to earlier layers;
    - ZeRO-3 parameter gathers are prefetched one layer ahead: the gathers
      of a layer start when the previous layer (in execution order: forward,
      then the backward pass in reverse) first uses its own, so each layer's
      parameters arrive while the one before computes. Gathered parameters
      are still freed after their last use.
    Layers are the `#dgraph.layer` indices of the gathers' users (set by
    the importer or dtcc-graph-mark-layers). Every rank runs
    the same program, so collectives start in the same order everywhere.
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

#endif // DTCC_PASSES_SHARDING_PASSES_TD
