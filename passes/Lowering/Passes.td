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
    - an elementwise op whose operand dies at it writes its result in place;
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
  let dependentDialects = ["dtcc::exec::ExecDialect"];
}

#endif // DTCC_PASSES_LOWERING_PASSES_TD
