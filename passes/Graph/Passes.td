//===- Passes.td - graph-level training passes -------------*- tablegen -*-===//

#ifndef DTCC_PASSES_GRAPH_PASSES_TD
#define DTCC_PASSES_GRAPH_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseAttention : Pass<"dtcc-graph-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Replaces each attention core by one dgraph.attention "
                "(FlashAttention: no score matrix kept for the backward)";
  let description = [{
    Finds the attention cores as selective recomputation does (a softmax
    between a matmul of two activations, the scores Q·Kᵀ, and a matmul of
    its output with another activation, ·V) and replaces each by one
    `dgraph.attention`, whose VJP is one `dgraph.attention_grad`: the
    forward keeps only its output and each query row's log-sum-exp, the
    backward recomputes the probabilities tile by tile. The
    `[..., Sq, Sk]` scores, masked scores and probabilities are no longer
    kept for the backward pass (nor computed whole).

    A core is fused only when the ops between the two matmuls form one
    chain of single uses of these kinds: multiplications and divisions by
    a positive constant (the `scale`, before or after the first matmul's
    masks), additions (and subtractions) of a mask that no trainable
    parameter reaches, selects of the scores against a constant fill
    <= -1e9 (a boolean mask: `where(mask, scores, -inf)`), then the
    softmax along the keys, whose output is the left operand of the
    product with the values. Q, K and V must have the same leading
    (batch, head) dimensions. The masks become one additive `mask` operand
    at their broadcast size (`[1, 1, S, S]`, not `[B, H, S, S]`); a mask
    that evaluates at compile time to the causal one (0 on and below the
    diagonal, <= -1e9 above) becomes the `causal` attribute instead, but
    under context parallelism (the plan's cp > 1: a rank's query rows are
    a chunk of the sequence, its keys all of it), where it stays the mask
    operand, split with the queries. A core
    with anything else (dropout, a second use of the scores or the
    probabilities, a learned bias, a broadcast batch) stays as it is.

    The module's `dgraph.fused_attention` string (set when it has attention
    cores) counts the cores fused
    and says why the others were not; `dtcc explain` prints it.
    `dtcc compile --train` runs this pass before autodiff unless
    `--no-fused-attention` is given.
  }];
  let options = [
    ListOption<"frozen", "frozen", "std::string",
               "Variables that are not trained (autodiff's): a mask read "
               "from one is a constant">,
    Option<"maxHeadDim", "max-head-dim", "int64_t", /*default=*/"0",
           "Cores whose head dimension (max of the query's and the value's "
           "last) is above this stay as they are: the target's attention "
           "kernels take no more (0: any)">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

def Autodiff : Pass<"dtcc-graph-autodiff", "mlir::ModuleOp"> {
  let summary = "Derives the backward pass: @train_step returns the loss and "
                "every parameter's gradient";
  let description = [{
    Clones `@main` (the forward pass and the loss, as imported) into
    `@train_step` and appends reverse-mode autodiff: starting from the loss
    with gradient 1, it visits the ops that lie between a parameter and the
    loss in reverse order and asks each for its vector-Jacobian product
    (`DifferentiableOpInterface`), summing the gradients of values used more
    than once. Parameters are the trainable variables (the model's float
    initializers) not named in `frozen`.

    `@train_step` returns the loss (named "loss") followed by one gradient
    per parameter, each tagged `dgraph.grad_of = @param` and named
    "grad/<param>"; dtcc-graph-optimizer consumes them. A parameter that
    reaches the loss through no chain of float values (read only by a
    comparison, an integer cast or a shape) has no gradient, as in PyTorch
    (.grad None), whose optimizers skip it: it becomes non-trainable, gets
    no result, is named in the module's `dgraph.untrained` (which `dtcc
    explain` prints) and is warned about. One whose path crosses ops without
    a gradient (floor, sign) gets a zero gradient and is updated (decayed)
    like any other. `@main` stays for
    inference, with its dropouts made identities and its training-mode batch
    normalizations (those with a `dgraph.batch_norm_update`) normalizing
    with the running statistics, which it no longer stores.

    With the plan's `recompute = full` (`dshard.plan`, passes/Planning; no
    plan: none), activations are recomputed instead of kept: the
    forward ops are grouped into segments (runs of ops of one layer, the
    `#dgraph.layer` index that the ONNX importer reads from node names such
    as `layers.3/...` and dtcc-graph-mark-layers finds in the graph's
    structure; with fewer than two layers, about sqrt(n) ops each) and,
    before the backward of a segment, its forward ops are
    cloned from the values that cross segment boundaries. Only those
    boundary values stay alive across the step, which the memory plan and
    the reported peak show. The last segment, whose backward follows its
    forward at once, is not recomputed.

    With `recompute = full, recompute_layers = K` (K > 0) only the segments
    of the first K layers are recomputed (Megatron's
    `--recompute-num-layers` with the "block" method); the others keep
    their activations. With pipeline stages (the plan's pp > 1), which
    layers a stage holds is decided later: every layer's segment is
    cloned here and dtcc-graph-recompute-layers, after
    dtcc-shard-pipeline, keeps the clones of the first K layers of each
    stage.

    With `recompute = selective` only the attention cores are recomputed
    (Korthikanti et al. 2022): for each softmax between a matmul of two
    activations (the scores Q·Kᵀ, through scale, mask and select) and a
    matmul of its output (through dropout) with another activation (·V),
    the ops on the paths from the first matmul to the second are cloned
    just before their backward. The QKV and output projections, the MLP,
    the norms and everything else keep their activations. The cores are
    found from the ops alone (an activation is a value computed from the
    step's inputs; parameters and constants are not), never from names or
    shapes, so models exported by PyTorch and the zoo's are alike. A model
    without an attention core recomputes nothing, with a warning.

    The module's `dgraph.recomputed` string says what was recomputed
    (mode, layers, op kinds and counts); `dtcc explain` prints it.

    The loss is the output named by `loss`, or the only scalar float output;
    `loss=cross_entropy:<logits>,<labels>` adds the mean cross-entropy of
    output `<logits>` ([..., classes]) against input `<labels>` (ignoring
    label -100).

    Every backward op (a VJP, the sum of a value's gradients) takes the
    `dgraph.layer` of the forward op it differentiates; recomputed clones
    keep theirs.

    Errors: an op on the gradient path without a VJP rule (named, at its
    ONNX node); no loss or an ambiguous one; a frozen name that is neither
    a variable nor one of the importer's constant initializers
    (`dgraph.constant_initializers`: integer and bool initializers, which
    `frozen` may name, as a model's named_buffers() lists them).

    Example: for `@main(%x) -> loss` with `%l = dgraph.mul %w, %x`, a
    `@train_step` returning `(%loss, %dw)` where `%dw = dgraph.mul %g, %x`.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "The loss: an output name, or cross_entropy:<logits>,<labels>">,
    ListOption<"frozen", "frozen", "std::string",
               "Variables that are not trained">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

def RecomputeLayers : Pass<"dtcc-graph-recompute-layers", "mlir::ModuleOp"> {
  let summary = "Keeps full recomputation for the first K layers of each "
                "pipeline stage";
  let description = [{
    For a plan with `recompute = full, recompute_layers = K` (K > 0), run
    after dtcc-shard-pipeline: dtcc-graph-autodiff cloned the forward ops of
    every layer for the backward (it cannot know the stages), and this pass
    keeps those clones (`dgraph.recompute`) only for the first K layers of
    each function, in the order its forward ops meet them; with pipeline
    stages each `@train_step_pp<k>` is one stage, so these are the first K
    layers of each stage (all of them when the stage has fewer). It first
    eliminates common subexpressions (the micro-batches' copies of an op on
    shared operands become one); then every other clone is replaced by the
    forward op it copies (the same op on the same operands, earlier in the
    block), whose result then stays alive until the backward. A clone whose forward op is gone (folded since)
    stays. Other plans: nothing changes. With any recomputation it rewrites
    `dgraph.recomputed`, which then lists each stage's function.

    Example: with K = 1 and a stage holding layers 2 and 3, the clones of
    layer 3's `dgraph.matmul` and `dgraph.gelu` in the backward are
    replaced by the forward ones; layer 2's stay.
  }];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

def MixedPrecision : Pass<"dtcc-graph-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Runs @train_step's forward and backward pass in bf16 or "
                "fp16 with fp32 master weights";
  let description = [{
    Runs after dtcc-graph-autodiff and before dtcc-graph-optimizer. The
    variables stay fp32: they are the master weights, and the optimizer
    state the optimizer adds later is fp32 too. In `@train_step`, every fp32
    variable load is cast to the half type once, right after the load, and
    that cast feeds the forward and the backward pass. Ops are then typed by
    a policy close to PyTorch autocast:

    - `dgraph.matmul` and the convolutions (`conv`, `conv_input_grad`,
      `conv_filter_grad`) always run in the half type (cuBLASLt and cuDNN
      accumulate in fp32; the CPU backend goes through sgemm and oneDNN's
      f32 convolutions).
    - Norms and softmax read and write the half type: `softmax`,
      `layer_norm`, `rms_norm`, `attention` and their gradients
      (`softmax_grad`, `layer_norm_grad`, `rms_norm_grad`,
      `attention_grad`) take half operands (the scale and
      bias are the half copies of the master weights) and give half
      results, while their kernels compute in fp32 or wider (max and sum of
      exponentials, mean, variance, rstd) and round once when they store;
      the statistics kept for the backward pass (`mean`, `rstd`,
      attention's `logsumexp`) are fp32.
      This is how Megatron-LM's fused kernels, MPT's low-precision
      LayerNorm and FSDP2 with bf16 parameters run them, and it spares the
      casts around each op (two reads and writes of the tensor in fp32).
      With `half-norms=false` they run as PyTorch autocast runs them: in
      fp32 between casts, with fp32 scale and bias, handing a half result
      to their half users.
    - Other numerically sensitive ops run in fp32 with casts around them:
      `log_softmax_grad` and `cross_entropy_grad`, and `batch_norm`,
      `batch_norm_grad`, `group_norm`, `group_norm_grad`, `grid_sample`
      and `grid_sample_grad` (a half grid misplaces samples), which hand a
      half result to their half users. `log_softmax` and
      `cross_entropy` take fp32 inputs and their results stay fp32, so the
      loss path (and what is computed from it) is fp32: the loss is reduced
      in fp32. So do `batch_norm_stats` and `batch_norm_grad_stats`: batch
      statistics, running statistics and the gradients of batch
      normalization's parameters are fp32.
    - Every other op runs in the widest type among its float operands that
      depend on an input or a variable (half < fp32): activations that come
      from half weights are half, and anything mixed with an fp32 value is
      promoted, not rounded. Values computed from constants alone (masks,
      scales, iota) take the type of the op that uses them; constants are
      converted, not cast at run time.
    - Explicit `dgraph.cast` ops of the model keep their types; f64 is left
      alone; `@main` (inference) is not changed.

    `@train_step`'s results keep their types: the loss is fp32 and each
    gradient (`dgraph.grad_of`) is cast back to fp32, so dtcc-graph-optimizer
    updates fp32 masters with fp32 AdamW/SGD state.

    fp16 (5 exponent bits) also scales the loss: the gradient seed of the
    loss (the constant autodiff tags `dgraph.grad_seed`) becomes `loss-scale`
    and each fp32 gradient is multiplied by `1/loss-scale`, so small
    gradients do not flush to zero in the half backward pass. The scaling is
    static (default 1024, a power of two so that unscaling is exact); there
    is no dynamic scaling (skipping a step and halving the scale on inf/nan)
    yet — lower `loss-scale` if gradients overflow. bf16 has fp32's exponent
    range and needs no scaling. `dtype=fp32` leaves the module unchanged.

    Postcondition: the module carries `dtcc.dtype` (`bf16` or `fp16`).

    Example (`dtype=bf16`):
    ```mlir
    %w = dgraph.load @w : tensor<4x4xf32>
    %y = dgraph.matmul %x, %w : ... -> tensor<2x4xf32>
    %s = dgraph.softmax %y dim = 1 : tensor<2x4xf32>
    ```
    becomes
    ```mlir
    %w = dgraph.load @w : tensor<4x4xf32>
    %wh = dgraph.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
    %y = dgraph.matmul %xh, %wh : ... -> tensor<2x4xbf16>
    %y32 = dgraph.cast %y : tensor<2x4xbf16> to tensor<2x4xf32>
    %s32 = dgraph.softmax %y32 dim = 1 : tensor<2x4xf32>
    %s = dgraph.cast %s32 : tensor<2x4xf32> to tensor<2x4xbf16>
    ```
    and the gradient of `@w` is cast to `tensor<4x4xf32>` before the return.
    With `widen-terms` (a pipeline: dtcc compile sets it for pp > 1), a
    gradient summed from several terms (a weight several ops read: tied
    embeddings and heads) is summed in fp32 from each term widened instead:
    its terms stay apart as in an fp32 program, so dtcc-shard-pipeline sums
    those of different stages after the micro-batches. Without it the sum
    stays half, the one value `--grad-reduce half` reduces over dp.

    Errors: an unknown `dtype`; no `@train_step`, or one the optimizer has
    already consumed; fp16 loss scaling without the autodiff seed.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"fp32\"",
           "Compute type of the forward and backward pass: bf16, fp16 or fp32">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"1024.0",
           "Static loss scale for fp16 (1: none); ignored for bf16 and fp32">,
    Option<"halfNorms", "half-norms", "bool", /*default=*/"true",
           "Norms and softmax read and write the half type (f32 inside the "
           "kernel); false: f32 between casts, as PyTorch autocast">,
    Option<"widenTerms", "widen-terms", "bool", /*default=*/"false",
           "A gradient summed from several terms is summed in fp32 from each "
           "term widened (pipelines: terms of different stages)">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

def MarkLayers : Pass<"dtcc-graph-mark-layers", "mlir::ModuleOp"> {
  let summary = "Finds the layers of a model whose ops carry no "
                "#dgraph.layer, from the graph's structure";
  let description = [{
    Recomputation (`dtcc-graph-autodiff recompute=full`), pipeline stages
    (`dtcc-shard-pipeline`) and ZeRO prefetching (`dtcc-shard-overlap`)
    go layer by layer, reading each op's `dgraph.layer`
    (`#dgraph.layer<module = ..., index = ...>`). The ONNX importer sets it
    from node names (`layers.3/...`, `/transformer/h.3/...`, a top-level
    module `/enc1/...`). This pass sets it for a module in which no op
    carries one (a model exported with anonymous node names, IR written by
    hand); a module with any `dgraph.layer` is left as it is, so the
    attribute is set once.

    In each function (the forward model: run it before
    dtcc-graph-autodiff), the *activations* are the values computed from
    both an argument and a variable. The function is cut after every op
    where exactly one activation is alive (a transformer's residual stream
    after each residual add, an MLP's or a plain CNN's value between two
    ops); the cuts split it into segments. Segments are compared by the
    sequence of their ops' names, and the longest run of a repeated
    sequence of segments (a transformer layer is two: attention and MLP,
    each up to its residual add) gives one layer per repetition; the parts
    before and after it are searched the same way (an encoder's layers,
    then a decoder's). Layers are numbered in program order. With
    `parts`, a function with no repeated segments (a plain CNN) has its
    segments marked as modules (`module = "part.N"`), which pipelines cut
    between; dtcc compile sets it when it pipelines. Layers the importer
    read from node names are kept, except, with `parts`, names that number
    no layers and give one top-level module (a model held by a wrapper's
    attribute: every node under `/m/`), whose marks are replaced by the
    structure's. What is computed
    from variables alone (a load, a bias's broadcast) takes the layer of
    its users when they are all of one; constants and what is computed from
    inputs alone (masks, labels) belong to no layer, as with the importer.

    Errors: a module that already has `@train_step` and no layers (the
    backward pass hides the forward structure: run this pass first).

    Example: `%h = dgraph.matmul %x, %w0`, `%a = dgraph.tanh %h`,
    `%y = dgraph.matmul %a, %w1`, `%b = dgraph.tanh %y` becomes the same
    ops with `{dgraph.layer = #dgraph.layer<index = 0>}` on the first two
    and `{dgraph.layer = #dgraph.layer<index = 1>}` on the last two.
  }];
  let options = [
    Option<"parts", "parts", "bool", /*default=*/"false",
           "Without repeated layers, mark the pieces as modules part.N">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

def Optimizer : Pass<"dtcc-graph-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends the optimizer step to @train_step";
  let description = [{
    Consumes the gradients `@train_step` returns (tagged `dgraph.grad_of`)
    and appends one training step: the step counter `@__step` is
    incremented, the learning rate comes from `dgraph.lr_schedule` (warmup,
    then constant, linear or cosine decay over `@__total_steps`), the global
    gradient norm is computed and, with `grad-clip`, every gradient scaled by
    `min(1, clip / (norm + 1e-6))`, and each parameter is updated by
    `dgraph.adamw` or `dgraph.sgd` whose state lives in new variables
    (`<param>/adam_m`, `<param>/adam_v`, `<param>/momentum`).

    With one micro-batch, `@train_step` returns `loss`, `lr` and
    `grad_norm`. With the plan's M = `micro_batches` > 1 and no pipeline
    (`dshard.plan`'s accumulation steps; no plan: 1), `@train_step` adds its
    gradients into `<param>/grad_acc` and returns `loss`, and a new
    `@apply_step` applies the mean of the accumulated gradients, zeroes the
    accumulators and returns `lr` and `grad_norm` (see docs/training-abi.md).
    `export-gradients` keeps the gradients among `@train_step`'s results.

    With the plan's `offload = optimizer`, dtcc-lower-to-exec places the
    updates and their state in host memory; an optimizer without state
    (SGD with momentum 0) is an error here.

    Postcondition: the module carries `dtcc.train` and `dtcc.optimizer`
    attributes, which become the program's metadata (with the plan's
    accumulation steps as `dtcc.micro_batches`).
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"", "adamw or sgd">,
    Option<"lr", "lr", "double", "3e-4", "Peak learning rate">,
    Option<"minLr", "min-lr", "double", "0.0", "Learning rate at the end of decay">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "Decoupled weight decay (AdamW) or L2 penalty (SGD)">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"dampening", "dampening", "double", "0.0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"gradClip", "grad-clip", "double", "0.0",
           "Global gradient-norm clipping threshold (0: none)">,
    Option<"warmup", "warmup", "int64_t", "0", "Linear warmup steps">,
    Option<"schedule", "schedule", "std::string", "\"constant\"",
           "constant, linear or cosine">,
    Option<"exportGradients", "export-gradients", "bool", "false",
           "Also return the gradients from @train_step">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

#endif // DTCC_PASSES_GRAPH_PASSES_TD
