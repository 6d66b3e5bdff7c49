//===- ExecOps.td - dexec operations -----------------------*- tablegen -*-===//

#ifndef DTCC_DIALECTS_EXEC_IR_EXECOPS_TD
#define DTCC_DIALECTS_EXEC_IR_EXECOPS_TD

include "dialects/Exec/IR/ExecDialect.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Exec_BufferOp : Exec_Op<"buffer", [Pure]> {
  let summary = "A view of an arena at a fixed offset";
  let description = [{
    Names `offset` bytes into `arena` as a memref. The device's arenas are
    "workspace", "state" and "constant"; a program whose optimizer runs on
    the host (`--offload optimizer`) also has the host's, "host_workspace"
    and "host_state", each with its own static memory plan. State buffers
    name the variable they hold; constant buffers carry their value, which
    the serializer writes to the data section.

    Example:
    ```mlir
    %x = dexec.buffer "workspace"[128] : memref<2x4xf32>
    %w = dexec.buffer "state"[0] {variable = @fc.weight} : memref<4x3xf32>
    %b = dexec.buffer "workspace"[128] : memref<2x4x3xf32, strided<[4, 1, 0]>>
    %c = dexec.buffer "constant"[0] {value = dense<[1.0, 2.0]> : tensor<2xf32>}
        : memref<3x2xf32, strided<[0, 1]>>
    %m = dexec.buffer "host_state"[0] {variable = @fc.weight/adam_m} : memref<4x3xf32>
    %t = dexec.buffer "workspace"[0] {live = array<i64: 2, 5>} : memref<8xf32>
    ```

    A workspace buffer's `live` is the lifetime of the memory it views, in
    the function's kernels: from the kernel index `live[0]` to `live[1]`
    (inclusive), as dtcc-lower-to-exec's memory plan kept it. It spans every
    view of that memory (a reshape read long after its producer wrote the
    whole), which the kernels that name one view do not show; the planner's
    memory report reads it (planner/ProgramModel.cpp). Absent: the memory is
    live at no kernel (an input nothing reads), or the buffer came from
    elsewhere (hand-written IR).

    **Constraints:**
    - the arena is "workspace", "state", "constant", "host_workspace" or
      "host_state";
    - the offset is non-negative and a multiple of the element size;
    - a constant buffer has a value of the memref's element type and, with
      an identity layout, its number of elements (a reshape views the
      constant); with a strided layout (a splat seen with stride 0, a
      broadcast of a constant), exactly the elements its extent
      `1 + sum((size - 1) * stride)` spans;
    - the memref has a static shape and an identity or strided layout with
      non-negative strides and zero offset;
    - `live`, where present, is on a workspace buffer ("workspace" or
      "host_workspace") and is two kernel indices, 0 <= first <= last.
  }];
  let arguments = (ins StrAttr:$arena, I64Attr:$offset,
                       OptionalAttr<FlatSymbolRefAttr>:$variable,
                       OptionalAttr<ElementsAttr>:$value,
                       OptionalAttr<StrAttr>:$name,
                       OptionalAttr<DenseI64ArrayAttr>:$live);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "$arena `[` $offset `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Exec_KernelOp : Exec_Op<"kernel", [AttrSizedOperandSegments]> {
  let summary = "Calls a runtime kernel on buffers";
  let description = [{
    Runs the runtime kernel `kernel` with `ins` as inputs and `outs` as
    outputs; `attrs` are passed to the kernel by name (the attributes of the
    dgraph op it came from). The location is the ONNX node that caused it.

    A kernel marked `host` runs on the host with the CPU kernels, on buffers
    of the host arenas (an offloaded optimizer step). The transfers between
    the two memory spaces are kernels of their own: `copy_to_host` (device
    buffer in, host buffer out) and `copy_to_device` (the reverse), which
    the device runs with its copy routines (a copy stream on a GPU).

    Example:
    ```mlir
    dexec.kernel "matmul" ins(%x, %w : memref<2x4xf32>, memref<4x3xf32>)
        outs(%y : memref<2x3xf32>) attrs {transpose_rhs}
    dexec.kernel "copy_to_host" ins(%g : memref<4x3xf32>)
        outs(%hg : memref<4x3xf32>) attrs {}
    dexec.kernel "adamw" ins(%hp, %hg, %m, %v, %lr, %t, %s : ...)
        outs(%hp, %m, %v : ...) attrs {...} {host}
    ```

    **Constraints:**
    - the kernel name is not empty;
    - outputs reach each element once: identity (contiguous) layouts, or
      strided views (of a larger buffer) whose strides do not overlap; the
      kernels that write through strides are those Kernels.td marks
      RowStrided;
    - where operands are `dexec.buffer`s: a `host` kernel reads and writes
      host arenas only; `copy_to_host` reads the device's and writes the
      host's, `copy_to_device` the reverse; every other kernel reads and
      writes the device's arenas only.
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<AnyStaticShapeMemRef>:$ins,
                       Variadic<AnyStaticShapeMemRef>:$outs,
                       DictionaryAttr:$attrs, UnitAttr:$host);
  let assemblyFormat = [{
    $kernel (`ins` `(` $ins^ `:` type($ins) `)`)? (`outs` `(` $outs^ `:` type($outs) `)`)?
    `attrs` $attrs attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_InputOp : Exec_Op<"input"> {
  let summary = "Binds a function input to a buffer";
  let description = [{
    The runtime copies the input called `name` into `buffer` before the
    function's first kernel.

    Example:
    ```mlir
    dexec.input "x", %x : memref<2x4xf32>
    ```

    **Constraints:**
    - the buffer is a contiguous workspace buffer.
  }];
  let arguments = (ins StrAttr:$name, AnyStaticShapeMemRef:$buffer);
  let assemblyFormat = "$name `,` $buffer attr-dict `:` type($buffer)";
}

def Exec_OutputOp : Exec_Op<"output"> {
  let summary = "Binds a function output to a buffer";
  let description = [{
    After the function's last kernel, `buffer` holds the output `name`.

    Example:
    ```mlir
    dexec.output "y", %y : memref<2x3xf32>
    ```

    **Constraints:**
    - the buffer is contiguous.
  }];
  let arguments = (ins StrAttr:$name, AnyStaticShapeMemRef:$buffer);
  let assemblyFormat = "$name `,` $buffer attr-dict `:` type($buffer)";
}

#endif // DTCC_DIALECTS_EXEC_IR_EXECOPS_TD
