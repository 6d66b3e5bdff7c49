//===- Passes.td - graph-level training passes -------------*- tablegen -*-===//

#ifndef DTCC_PASSES_GRAPH_PASSES_TD
#define DTCC_PASSES_GRAPH_PASSES_TD

include "mlir/Pass/PassBase.td"

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
    "grad/<param>"; dtcc-graph-optimizer consumes them. `@main` stays for
    inference, with its dropouts made identities.

    With `recompute=full`, activations are recomputed instead of kept: the
    forward ops are grouped into segments (transformer layers, found from
    their ONNX node names such as `layers.3/...`; otherwise about sqrt(n)
    ops each) and, before the backward of a segment, its forward ops are
    cloned from the values that cross segment boundaries. Only those
    boundary values stay alive across the step, which the memory plan and
    the reported peak show.

    The loss is the output named by `loss`, or the only scalar float output;
    `loss=cross_entropy:<logits>,<labels>` adds the mean cross-entropy of
    output `<logits>` ([..., classes]) against input `<labels>` (ignoring
    label -100).

    Errors: an op on the gradient path without a VJP rule (named, at its
    ONNX node); no loss or an ambiguous one; an unknown frozen variable.

    Example: for `@main(%x) -> loss` with `%l = dgraph.mul %w, %x`, a
    `@train_step` returning `(%loss, %dw)` where `%dw = dgraph.mul %g, %x`.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"\"",
           "The loss: an output name, or cross_entropy:<logits>,<labels>">,
    ListOption<"frozen", "frozen", "std::string",
               "Variables that are not trained">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"none\"",
           "Activation recomputation: none or full">,
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
    `grad_norm`. With `micro-batches` M > 1, `@train_step` adds its
    gradients into `<param>/grad_acc` and returns `loss`, and a new
    `@apply_step` applies the mean of the accumulated gradients, zeroes the
    accumulators and returns `lr` and `grad_norm` (see docs/training-abi.md).
    `export-gradients` keeps the gradients among `@train_step`'s results.

    Postcondition: the module carries `dtcc.train`, `dtcc.micro_batches` and
    `dtcc.optimizer` attributes, which become the program's metadata.
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
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step (gradient accumulation)">,
    Option<"exportGradients", "export-gradients", "bool", "false",
           "Also return the gradients from @train_step">,
  ];
  let dependentDialects = ["dtcc::graph::GraphDialect", "mlir::func::FuncDialect"];
}

#endif // DTCC_PASSES_GRAPH_PASSES_TD
