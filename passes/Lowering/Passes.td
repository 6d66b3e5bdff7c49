//===- Passes.td - lowering passes -------------------------*- tablegen -*-===//

#ifndef DTCC_PASSES_LOWERING_PASSES_TD
#define DTCC_PASSES_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToExec : Pass<"dtcc-lower-to-exec", "mlir::ModuleOp"> {
  let summary = "Lowers dgraph functions to dexec: buffers, offsets, kernels";
  let description = [{
    Turns every function of dgraph ops into a straight-line dexec program:

    - each tensor value gets storage: a variable's state buffer
      (`dgraph.load`), a constant buffer (`dgraph.constant`), or a workspace
      buffer whose offset comes from the static memory plan
      (MemoryPlan.h: greedy by size over value lifetimes);
    - `dgraph.reshape` becomes a view of its operand's storage, and a
      `dgraph.broadcast_in_dim` whose users are all elementwise becomes a
      stride-0 view (no copy);
    - with `strided-views` (the default), a `dgraph.transpose`,
      `dgraph.slice` or reshape whose readers are kernels that take strided
      rows (Kernels.td's RowStrided: attention and its gradient) becomes a
      strided view (a buffer with strides and an offset into its operand's
      storage), and such a kernel writes a result through a strided view
      where transposes and reshapes follow it: into the buffer they would
      have copied it to, or into the slots of the `dgraph.concat` they end
      in. Attention's heads then move no data: the slices of a packed
      Q/K/V projection and the heads' transposes, the output's transpose
      back, and the concat of the heads' gradients disappear;
    - an elementwise op whose operand dies at it writes its result in place,
      and so does an all-reduce (an asynchronous one whose input only its
      own wait reads after it starts); a device variable's state buffer
      counts as dead between its value's last read and a store that
      overwrites it later in the function, for results read before that
      store (@apply_step takes each gradient accumulator's mean and its dp
      sum in the accumulator it zeroes after, not in a copy);
    - every other dgraph op (and dshard collective) becomes a `dexec.kernel`
      named after the op, with the op's attributes under the kernel's names
      for them (the kernel-signature table, runtime/kernels/Kernels.td:
      dshard's `axis`, `kind` and `peer` are `axes`, `reduce` and `offset`);
      `dgraph.store` copies into the variable's buffer;
    - every kernel call, copies included, is checked against the
      kernel-signature table, the one both backends check a program against
      when they load it: an op attribute the kernel does not take, or a call
      with the wrong operand count, element type, rank or attribute, is an
      error at the op naming the kernel;
    - function arguments and results become `dexec.input`/`dexec.output`
      bindings named by their `dgraph.name` attributes.

    With the plan's `offload = optimizer` (ZeRO-Offload) the program has a
    second memory space, the host's:

    - `dgraph.adamw` and `dgraph.sgd` become host kernels (`{host}`: the
      runtime runs them with the CPU kernels); the variables only they read
      and write (Adam's moments, SGD's momentum) live in the "host_state"
      arena, and their results and the copies of their operands in the
      "host_workspace" arena, planned like the workspace;
    - a device value a host kernel reads is copied to the host
      (`copy_to_host`) right after the op that makes it final (for an
      asynchronous collective, its `dshard.wait`), so a gradient leaves
      while the backward pass goes on; a host value a device op or variable
      needs comes back with `copy_to_device` (the updated parameter);
    - a transfer runs asynchronously on a GPU: its source's lifetime
      extends to the next host kernel, which waits for the transfers before
      it, or to the function's end.

    The module then also carries `dexec.host_workspace_bytes` and
    `dexec.host_state_bytes`, each host variable `dexec.arena =
    "host_state"`, and each function with host kernels its
    `dexec.host_workspace_bytes`.

    Preconditions: functions have one block of dgraph ops ending in
    `func.return`. Postconditions: functions take and return nothing; the
    module carries `dexec.workspace_bytes`, `dexec.state_bytes` and
    `dexec.constant_bytes`, each function `dexec.workspace_bytes`, and each
    variable its state-arena offset as `dexec.offset`.

    Example:
    ```mlir
    func.func @main(%x: tensor<4xf32> {dgraph.name = "x"})
        -> (tensor<4xf32> {dgraph.name = "y"}) {
      %y = dgraph.exp %x : tensor<4xf32>
      return %y : tensor<4xf32>
    }
    ```
    becomes
    ```mlir
    func.func @main() attributes {dexec.workspace_bytes = 64 : i64} {
      %0 = dexec.buffer "workspace"[0] : memref<4xf32>
      dexec.input "x", %0 : memref<4xf32>
      dexec.kernel "exp" ins(%0 : memref<4xf32>) outs(%0 : memref<4xf32>) attrs {}
      dexec.output "y", %0 : memref<4xf32>
      return
    }
    ```
  }];
  let options = [
    Option<"stridedViews", "strided-views", "bool", /*default=*/"true",
           "Pass transposes, slices and reshapes to kernels that read "
           "strided rows (attention) as views, and let such kernels write "
           "into the transposes' and concats' buffers (false: copies)">,
    Option<"roundedCopies", "rounded-copies", "bool", /*default=*/"false",
           "An optimizer update's new parameter rounded into its "
           "compute-type copy (dtcc-shard-half-weight-copies' cast and "
           "store) is written by the update kernel itself, as its last "
           "output (the CPU kernels take it)">
  ];
  let dependentDialects = ["dtcc::exec::ExecDialect"];
}

def FoldNarrowReads : Pass<"dtcc-fold-narrow-reads", "mlir::ModuleOp"> {
  let summary = "Kernels read half-precision tensors without their f32 casts (the optimizer's gradients, the loss's logits)";
  let description = [{
    Runs first in the exec phase (before `dtcc-lower-fuse-regions` and
    `dtcc-lower-to-exec`), after autodiff, the optimizer and the
    partitioning, on one rank's dgraph program. Mixed precision
    (`dtcc-graph-mixed-precision`) keeps the optimizer step and the loss in
    f32: every bf16 (or f16) gradient is cast to its f32 parameter's type,
    the global norm's clipping squares each gradient into a copy it then
    sums, and the logits are cast to f32 for the cross-entropy, whose f32
    gradient is cast back. Each cast writes a full copy (the logits' f32
    copy and their gradient's are the largest tensors of a language
    model's step). This pass rewrites

    - `reduce_sum(mul(x, x))` over every dimension of `x`, the `mul` used
      nowhere else, into `dgraph.sum_squares` of `x`, or of `x`'s source
      when `x` is a cast of a narrower float (bf16 or f16 to f32): the
      result is the same sum (each square in f32, summed in reduce_sum's
      order), without the squared copy;
    - the gradient of `dgraph.adamw`, when it is such a cast of a bf16 or
      f16 gradient of an f32 parameter, into the narrow gradient itself
      (adamw widens it as it reads it);
    - `dgraph.cross_entropy` of such a cast into the cross-entropy of the
      narrow logits with an f32 loss (computed in f32, as before);
    - `cast(cross_entropy_grad(cast(x), labels, dloss))` back to x's type,
      the gradient used only by that cast, into `cross_entropy_grad(x,
      labels, dloss)` of x's type (computed in f32, rounded once, as the
      cast rounded it);

    and erases the casts and products left unused. Every rewrite gives the
    same values to the bit. A tensor read after a cast by anything else
    keeps its cast. Sums over some dimensions only (a norm written from
    reductions) are left to `dtcc-lower-fuse-regions`.
  }];
}

def FoldGlobalNorm : Pass<"dtcc-fold-global-norm", "mlir::ModuleOp"> {
  let summary = "Sums a global norm's squares over every gradient in one op";
  let description = [{
    Runs in the exec phase right after `dtcc-fold-narrow-reads`, which
    makes each gradient's `dgraph.sum_squares`. Gradient clipping adds
    those scalars one after the other (`add(add(s0, s1), s2)...`); this
    pass replaces each such chain, every add of it having a whole-tensor
    `sum_squares` read only there among its operands and, as its other
    operand, another such sum or an add of the chain read only there, with
    one `dgraph.global_sum_squares` of the sums' operands in the chain's
    order. Its kernels (CPU, CUDA) sum each operand and add the sums in
    that order, the CPU's to the bit what the chain gave; on a GPU the
    sums of every gradient are one launch (and a second that adds them)
    instead of a reduction and an add per gradient. A chain broken by
    anything else (an all-reduce of a partial sum under sharding) folds
    on each side of the break.
  }];
}

def SinkTransposes : Pass<"dtcc-sink-transposes", "mlir::ModuleOp"> {
  let summary = "Moves transposes below the ops that read them, toward attention";
  let description = [{
    Runs first in the exec phase, on one rank's dgraph program. A
    `dgraph.transpose` moves below every op that reads it when each of them
    computes the same in the transpose's operand layout: an elementwise op
    whose other operands are transposes by the same permutation, broadcasts
    (whose dimensions, after dropping the operand's unit ones, stay in
    order) or splat constants; a slice, a pad (of its operand) or a concat
    of such transposes. Repeated until nothing moves. Exported Llamas
    transpose their heads to `[B, H, S, D]` before the rotary embedding
    (slices of the head dimension, a negation, a concat, products with the
    broadcast cos/sin tables, an add); moved below it, the transposes feed
    attention, which `dtcc-lower-to-exec` passes strided views instead of
    copies. Then each transpose the lowering would still copy moves above
    the op that makes its operand while it is that op's only reader
    (slices, pads, concats, elementwise ops: their other operands
    transposed too, broadcasts and splats remade), the transposes of one
    value merged: the embedding's gradient, transposed back after it, then
    transposes the key and query gradients attention_grad writes, which
    the lowering writes through views. A transpose read by several ops
    becomes one after each of them, which pays only where they join again
    or end in attention: each function is rewritten on a copy, kept only
    when fewer elements are copied by transposes that are not views.
  }];
}

def MatmulEpilogues : Pass<"dtcc-lower-matmul-epilogues", "mlir::ModuleOp"> {
  let summary = "A dense layer's bias in its products' epilogues";
  let description = [{
    Runs in the exec phase of `--target cuda` programs (`dtcc compile
    --matmul-epilogues`), before `dtcc-lower-fuse-regions`.

    Forward: a `dgraph.matmul` read only by a `dgraph.add` of a bias `[n]`
    broadcast over every dimension but the last (`n`, the product's)
    becomes one `dgraph.matmul_bias` where the add stood: CUDA adds the
    bias in cuBLASLt's epilogue (BIAS), rounding once, instead of a second
    pass over the product (or a region that also writes the pre-bias
    product).

    Backward: a `dgraph.reduce_sum` over every dimension but the last of a
    value `dy` (a bias gradient) and a `dgraph.matmul` of two matrices one
    of whose operands is `dy` or a reshape of it with rows of the same
    length, its rows contracted (the weight gradient `x^T dy`, `dy` the
    rhs not transposed; or `dy^T x` for a weight stored `[out, in]`, `dy`
    the lhs transposed) become one `dgraph.matmul_bias_grad`, whose CUDA
    kernel sums the rows in cuBLASLt's epilogue (BGRADA for the rhs,
    BGRADB for the lhs) instead of a second pass over `dy`. The op stands
    where the first of the two stood when the product's operands are
    defined there, else where the second stood when nothing in between
    reads the first; otherwise the pair stays. Each matmul pairs with one
    reduction.

    Where cuBLASLt has no algorithm with the epilogue, the CUDA kernels
    run the product and then the add or the reduction; the CPU runs both
    ops as their two kernels (for tests).
}];
}

def FuseRegions : Pass<"dtcc-lower-fuse-regions", "mlir::ModuleOp"> {
  let summary = "Groups elementwise chains into fused regions with generated kernels";
  let description = [{
    Runs right before `dtcc-lower-to-exec` (`dtcc compile --fuse`), after
    autodiff, the optimizer and the partitioning, on one rank's dgraph
    program. It groups producer-consumer chains of float (f32, f64, bf16,
    f16) elementwise ops into regions and replaces each region of two or
    more computing ops by a `dgraph.fused` call of a region function, which
    it adds to the nested module `dtcc_kernels` (created when needed):

    - fused ops: add, sub, mul, div, max, min, neg, abs, exp, log, sqrt,
      rsqrt, reciprocal, tanh, sigmoid, relu, silu, erf, gelu, pow, and the
      gradients gelu_grad and silu_grad (bias + activation epilogues,
      residual adds, scale/mask chains and their gradients);
    - with `rows` (the CPU target): `reduce_sum` and `reduce_max` along the
      last axis (of rank >= 2, longer than 1) join too, with the ops on
      their one value per row (`[rows...]` or `[rows..., 1]`), the
      reshapes between those two forms and the broadcasts back over the
      row: a *row region* (norms and softmaxes written from sums, means
      and maxima, and their gradients). Its function has the row form:
      one `scf.for` per row dimension, and in the innermost a pass over
      the columns for each step of reductions, the values a later pass or
      a reduction reads in row buffers (`memref.alloca`, at most 256 KiB
      in all, or the region is not formed), the reductions in the CPU
      kernels' order (8 lanes combined as a tree, pairwise halves above
      2048 elements; maxima with a NaN flag);
    - with `rows` and `parallel-rows` (the CUDA target), the same regions
      in the *parallel row form*: one `scf.parallel` over the row
      dimensions, in its body the row buffers (`memref.alloca` of one row,
      indexed by the column only) and per pass over the columns an
      `scf.parallel`; each reduction an `scf.parallel` with an `scf.reduce`
      (`arith.addf`, or `arith.maximumf`, which keeps NaN, from -inf), a
      norm's sum of f32 elements reduced in f64. No order of a reduction is
      fixed: compiler/codegen/GpuCodegen.cpp reduces a row with a block of
      threads;
    - with `rows`, a layer_norm_grad or rms_norm_grad along the last axis
      whose dy an op a region computes makes, or whose dx one reads, is
      written as the row ops of its dx in its kernel's order (xhat and g
      = dy * scale per row, the blocked sums of g * xhat and g in double
      times 1 / C) and a `dgraph.layer_norm_param_grad` /
      `rms_norm_param_grad` for its scale and bias gradients (the
      kernel's column sums, no region member); a half norm's f32
      statistics are cast to the rows' type, a cast that starts a row
      region. Without `parallel-rows` one whose region would take nothing
      else is written back (its kernel's one pass beats the region's and
      the parameter kernel's two);
    - with `rows`, a softmax, log_softmax, softmax_grad or log_softmax_grad
      along the last axis with a fusable neighbour (an operand or a user
      that a region computes) is first written as the ops a row region
      computes, in its kernel's order of operations (maximum from the
      first element, sums of exponentials in double blocks of 512, one
      reciprocal per row); `dtcc.fused_ops` names it as the op it was. One
      that no region takes whole is written back as the op; a row region
      whose row buffers do not fit is not formed, and the function is
      grouped again without its reductions;
    - a `dgraph.broadcast_in_dim` that keeps the order of dimensions is read
      through the generic's indexing map (its operand becomes the region's
      input, nothing materialized) and a splat `dgraph.constant` as a scalar
      in the body; either stays in the function only if something else
      reads it;
    - an op joins the regions of its producers (same result type, same
      `dshard.stage`) when no region member's result is read outside the
      region before it: the region runs where its last op was, so every
      outside reader comes after it and no cycle through an outside op can
      form;
    - cost rule: nothing is recomputed. A member read outside the region
      (several consumers, a store, a return) is a region output, written
      once; matrix products, convolutions, reductions other than the row
      regions' and collectives are never members, so no expensive work is
      duplicated or moved into a region;
    - values read only inside a region are never in memory: the lowering's
      memory plan sees only the region's inputs and outputs;
    - regions whose functions print the same (each layer's, the forward's
      in two functions) share one function, so its code is generated once.

    The region function is the form `compiler/codegen` compiles (docs/
    architecture.md, "Fused regions"): `func.func @<fn>_fused_<n>` taking
    one memref per input then per output (static shapes, identity layouts),
    with the row form above or one `linalg.generic` (all loops parallel; inputs through their
    indexing maps, outputs identity) whose body computes the ops with
    `arith` and `math` scalars, operation for operation as the CPU kernels
    do, and yields the outputs. It carries `dtcc.fused_ops` (the dgraph op
    names in order) and `dtcc.saved_bytes` (bytes of the values that stay
    inside). With `remarks`, each region is reported at its call.

    Example:
    ```mlir
    %b = dgraph.broadcast_in_dim %bias, dims = [1] : (tensor<16xf32>) -> tensor<8x16xf32>
    %a = dgraph.add %x, %b : tensor<8x16xf32>
    %y = dgraph.gelu %a : tensor<8x16xf32>
    ```
    becomes
    ```mlir
    %y = dgraph.fused @dtcc_kernels::@main_fused_0(%x, %bias)
        : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    module @dtcc_kernels {
      func.func @main_fused_0(%arg0: memref<8x16xf32>, %arg1: memref<16xf32>,
                              %arg2: memref<8x16xf32>) {
        linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d1),
                                         (d0, d1) -> (d0, d1)], ...}
            ins(%arg0, %arg1 : ...) outs(%arg2 : ...) { ... }
        return
      }
    }
    ```
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Report each region (ops, inputs, outputs, bytes kept out of memory)">,
    Option<"rows", "rows", "bool", "false",
           "Also form row regions: reductions along the last axis with the "
           "elementwise ops around them (the row form, which the CPU code "
           "generation compiles)">,
    Option<"parallelRows", "parallel-rows", "bool", "false",
           "With rows: write row regions in the parallel row form (rows and "
           "column passes as scf.parallel, each reduction an scf.parallel "
           "with scf.reduce, in no fixed order), which the CUDA code "
           "generation maps onto a block of threads per row">
  ];
  let dependentDialects = ["mlir::func::FuncDialect",
                           "mlir::linalg::LinalgDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect",
                           "mlir::memref::MemRefDialect"];
}

#endif // DTCC_PASSES_LOWERING_PASSES_TD
