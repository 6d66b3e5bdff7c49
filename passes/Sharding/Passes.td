//===- Passes.td - sharding passes: annotate, propagate, partition -*- tablegen -*-===//

#ifndef DTCC_PASSES_SHARDING_PASSES_TD
#define DTCC_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ShardAnnotate : Pass<"dtcc-shard-annotate", "mlir::ModuleOp"> {
  let summary = "Places a training step on a device mesh: data, ZeRO state";
  let description = [{
    Runs after dtcc-graph-optimizer (and dtcc-shard-pipeline with pp) on a
    module with a plan (`dshard.plan`, passes/Planning). Records the plan's
    mesh as the module's `dshard.mesh` (the mesh the program is placed on)
    and annotates the plan's fixed points; propagation fills in everything
    else.

    - Every argument of `@train_step` (and `@apply_step`) is a batch of
      data: dimension 0 is split over `dp`. A batch that `dp` does not
      divide is an error naming the input. A scalar (rank-0) argument
      has no batch dimension and is replicated: every rank gets the
      whole value.
    - The plan's ZeRO stage (`zero`) >= 1 splits each optimizer state variable (the state operands
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
    - The plan's `layouts`: a layout search's exact shardings are applied
      before the Megatron-style rules (which keep them), `rows`, `cols`
      and `whole` after them, replacing their choice.
    - `sequence_parallel` (with `tp` > 1): each sum over tp that ends a
      tensor-parallel region in the forward pass (the product of a weight
      whose rows are split over tp, a lookup in a vocab-parallel table) is
      constrained to its hidden state split along the sequence (dimension
      1 of `[batch, sequence, hidden]`; dimension 0 of `[tokens, hidden]`)
      over tp: `dshard.constraint {dshard.sequence}`, which partition makes
      a reduce-scatter and propagation carries through the ops up to the
      next region (docs/parallelism.md). A sequence tp does not divide is
      an error at that op.
    - `@main` (inference) is removed: a sharded program trains.

    - `half-weight-copies` (the default), ZeRO-1 or 2 over dp > 1 under
      mixed precision, with micro-batches accumulated or a pipeline
      (Megatron-LM's distributed optimizer): each fp32 master weight that
      the step reads only in the compute type gets a persistent copy in
      that type, `@W/half` (`dgraph.rounded_from = @W`, its layout without
      the dp split), which the forward and backward passes load instead
      of casting the master at every micro-batch; the update stores the
      new master rounded into it, and the master is split over dp with
      the optimizer state. (One micro-batch without a pipeline splits the
      master anyway and gathers it once in the compute type,
      `dshard.gather_once`.)

    Errors: a module without a plan or without `@train_step`, a plan with
    pp > 1 on a step not cut into stages, a batch that does not divide, a
    layout naming no 2-D variable.
  }];
  let options = [
    Option<"halfWeightCopies", "half-weight-copies", "bool", /*default=*/"true",
           "ZeRO-1/2 with micro-batches or a pipeline under mixed precision: "
           "persistent compute-type copies of the master weights, the "
           "masters split over dp">,
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
    replicated values; constants are replicated. A `dgraph.random` (no
    operand to take a split from) draws its result in the one layout all
    its users want, when they agree on one with contiguous blocks, rather
    than whole and sliced.

    Sequence parallelism: the tp split of a `dshard.constraint
    {dshard.sequence}`'s result, and of what ops compute from it, is weak
    like a ZeRO split: considered after every other split and yielding to
    any other use of tp (a column-parallel matmul gathers its input). A
    reduction over it stays partial when the sum is less than half the
    activation (norm and bias gradients), else the activation is gathered;
    optimizers take their gradient gathered; a partial sum over tp of the
    hidden state's type that an op resolves is taken as the sequence split
    (a reduce-scatter) when the op can compute on it; a reshape of the
    split whose users all want it gathered reshapes the gathered value;
    pipeline transfers of the hidden state's shape carry the split.

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
    of a partial sum serves later sharded users by slicing it. With the
    plan's `sequence_parallel`, what a forward-pass user had gathered is
    gathered again for a backward-pass user (by the pipeline's
    `dshard.pass` tag in a stage) rather than kept alive between them.

    Variables get their local type and keep their global initial value and
    `dshard.sharding` (the runtime takes its block of it); slice and pad
    bounds on split dimensions are divided by the split. A dropout on a
    split tensor, and a `dgraph.random` whose result is split, gets its
    block's offsets (from `dshard.axis_index`) and the whole tensor's
    shape, so that it draws the values one device would.

    Errors: a dimension the sharding does not divide (named, with the op);
    a dropout or random draw on a dimension split in groups (non-contiguous
    blocks).
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect"];
}

def ShardMicrobatch : Pass<"dtcc-shard-microbatch", "mlir::ModuleOp"> {
  let summary = "Unrolls the training step over micro-batches";
  let description = [{
    Runs after dtcc-graph-autodiff, for pipeline parallelism (a plan with
    pp > 1; with pp = 1 the optimizer accumulates the micro-batches
    instead). `@train_step` takes the plan's `micro_batches` times its batch along dimension 0 and computes the
    forward and backward pass once per micro-batch, on slices of its inputs
    (a scalar input has no batch: every micro-batch reads all of it);
    its loss and gradients are the means over the micro-batches (the same
    values as one pass over the whole batch). Each unrolled op carries its
    micro-batch (`dshard.micro`) and pass (`dshard.pass`, forward or
    backward) for dtcc-shard-pipeline. Ops that do not depend on the batch
    (parameter loads) are computed once.

    Errors: a module without a plan or without `@train_step`.
  }];
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
    `module`), in the order the forward pass meets them, cut into the plan's pp
    x V contiguous chunks (V = `virtual_stages`, 1 unless interleaved) that
    minimize the costliest chunk (cost: a matmul's multiply-adds, the
    elements any other op writes, forward and backward; the embeddings
    count on the first chunk, the head and loss on the last); chunk k runs
    on stage k mod pp, so stage s holds chunks s, s + pp, s + 2pp, ...
    (Megatron-LM's virtual stages). Ops outside layers go with their
    operands: a forward op to their last chunk; a backward op to the last
    chunk of the forward values it reads, else to the first of the
    gradients it reads, and no earlier than the backward ops that read it.
    Each op of the backward pass thus runs in the chunk of its forward op,
    and a parameter read outside the layers (a relative attention bias, a
    logit scale) is updated by the stage that reads it.

    Order: each stage runs its micro-batch tasks in the plan's schedule
    (planner/PipelineSchedule.h, the order the planner simulates): `gpipe`
    all forwards then all backwards; `1f1b` (PipeDream-Flush) `S - k - 1`
    forwards on stage k, then one forward and one backward in turn, then the
    remaining backwards, so at most `S - k` micro-batches' activations are
    alive at once (the memory plan shows it); `interleaved` Megatron-LM's
    interleaved 1F1B over the stage's V chunks (2(S - k - 1) + (V - 1)S
    warm-up forwards, micro-batches in groups of S; needs micro-batches a
    multiple of pp); `zb-h1` ZB-H1 (Qi et al. 2023): each micro-batch's
    backward on a stage is split into B, the ops the input gradients sent
    to earlier stages depend on, and W, the rest (the weight gradients);
    1F1B's order of forwards and Bs, with stage k deferring the W of its
    first k backwards into the drain, where 1F1B waits. Every op of a task
    carries `dshard.task` ("forward mb0", "input gradient mb1", "backward
    mb2 chunk1"), which the program keeps for the runtime's trace. A value
    another stage reads
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

    Errors: no plan, or one with pp < 2; fewer layers than stages; layers
    not divisible into pp x V chunks, or micro-batches not a multiple of pp,
    under the interleaved schedule; an op
    that combines values of several stages other than by a sum; a parameter
    read by a stage that does not update it (tied weights).
  }];
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

def ShardHalfWeightCopies : Pass<"dtcc-shard-half-weight-copies", "mlir::ModuleOp"> {
  let summary = "Persistent compute-type copies of the fp32 master weights";
  let description = [{
    Under mixed precision (dtcc-graph-mixed-precision) every fp32 master
    weight `@W` that the step's functions read only through casts to one
    half type (besides the optimizer op that updates it) gets a persistent
    copy `@W/half` of that type (`dgraph.rounded_from = @W`: the runtime
    starts it as W's initial value rounded, and a checkpoint restore rounds
    the restored master again). The casts become loads of the copy, and
    after the store of W's update its new value is rounded and stored into
    the copy: the values the casts gave, read without re-reading W.
    dtcc-shard-annotate makes the same copies for ZeRO-1/2 over dp; `dtcc
    compile` runs this pass for mixed-precision programs of either target
    (on one device, or on a mesh
    after partitioning: a copy takes its master's layout, stage and
    `dshard.global_type`), where dtcc-lower-to-exec folds the rounding
    into the AdamW kernel
    (`rounded-copies`), so the update writes the copy while it holds the
    new value and no pass of the step reads the masters again. @main
    (inference) keeps reading the masters. A weight with a copy
    (`dshard.half_copy`) keeps it.
  }];
}

def ShardBucket : Pass<"dtcc-shard-bucket", "mlir::ModuleOp"> {
  let summary = "Joins a layer's data-parallel collectives into one";
  let description = [{
    Runs after dtcc-shard-overlap. Each gradient's reduce-scatter or
    all-reduce, each ZeRO-3 parameter gather and each post-update parameter
    gather of ZeRO-1/2 over `dp` is a collective of its own after
    partitioning; each pays the ring's latency (n - 1 steps), which over
    hundreds of ranks outweighs the transfer of a layer's norms and biases.
    As PyTorch FSDP sends one flat buffer per wrapped unit, the collectives
    of one kind, pass and layer (a gradient's layer is its maker's, a
    gathered parameter's its first user's, an update's its gradient's)
    become one: each member's tensor reshaped to [ranks, elements / ranks]
    (a block of dimension 0 is a row; one row for a gather's shard or an
    all-reduce), joined along dimension 1, sent once where the last member
    was sent, waited for where the first member was waited for, and sliced
    back. Asynchronous members join while the bucket's send stays before
    every member's wait; synchronous ones are the optimizer's parameter
    gathers, each stored into a variable nothing reads after (the store
    moves down with it). Collectives split along another dimension, of
    other kinds than sum, or over other axes stay as they are; so does
    everything with the optimizer offloaded. Only latency-bound
    collectives join: those whose bytes are at most (ranks - 1) x 256 KiB,
    what a ring step moves in its latency (1 us x 370 GB/s on NVLink 4,
    5 us x 50 GB/s on NDR InfiniBand); a larger one would be copied in and
    out for a latency its transfer dwarfs. A bucket of m members over n
    ranks is sent as one only when the latency it saves, (m - 1)(n - 1)
    steps of 1 us, exceeds the kernels it adds, a join and m slices of 2 us
    each: 8 ranks join any two members, 4 ranks six or more, 2 ranks never.
  }];
  let dependentDialects = ["dtcc::shard::ShardDialect",
                           "dtcc::graph::GraphDialect"];
}

#endif // DTCC_PASSES_SHARDING_PASSES_TD
