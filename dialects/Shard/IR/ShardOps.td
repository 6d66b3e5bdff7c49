//===- ShardOps.td - dshard operations ---------------------*- tablegen -*-===//

#ifndef DTCC_DIALECTS_SHARD_IR_SHARDOPS_TD
#define DTCC_DIALECTS_SHARD_IR_SHARDOPS_TD

include "dialects/Shard/IR/ShardAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Shard_Tensor : StaticShapeTensorOf<[AnyType]>;

def Shard_ConstraintOp : Shard_Op<"constraint",
    [SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Requires a value to have a sharding";
  let description = [{
    In the global program, before partitioning: the result is the operand,
    laid out as `sharding`. Propagation treats it as a fixed point; the
    partitioner reshards into it. It has no effect on values.

    Example:
    ```mlir
    %g = dshard.constraint %grad, #dshard.sharding<[{}, {} ]> : tensor<64x32xf32>
    ```

    **Constraints:**
    - the sharding has one entry per dimension of the operand.
  }];
  let arguments = (ins Shard_Tensor:$operand, Shard_ShardingAttr:$sharding);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = "$operand `,` $sharding attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Shard_AxisIndexOp : Shard_Op<"axis_index", [Pure]> {
  let summary = "This rank's coordinate on a mesh axis";
  let description = [{
    Example:
    ```mlir
    %i = dshard.axis_index "tp" : tensor<i64>
    ```

    **Constraints:**
    - the result is an i64 scalar.
  }];
  let arguments = (ins StrAttr:$axis);
  let results = (outs 0DTensorOf<[I64]>:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

class Shard_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Shard_Op<mnemonic, traits> {
  let hasVerifier = 1;
}

def Shard_AllReduceOp : Shard_CollectiveOp<"all_reduce",
    [SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Reduces a tensor over a mesh axis; every rank gets the result";
  let description = [{
    Example:
    ```mlir
    %y = dshard.all_reduce %x "dp" {kind = "sum"} : tensor<64x32xf32>
    ```

    **Constraints:**
    - `kind` is "sum", "max", "min" or "prod".
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis,
                       DefaultValuedStrAttr<StrAttr, "sum">:$kind);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = "$operand $axis attr-dict `:` type($result)";
}

def Shard_AllGatherOp : Shard_CollectiveOp<"all_gather"> {
  let summary = "Concatenates the ranks' tensors along a dimension";
  let description = [{
    Rank `i` of the axis contributes block `i` of dimension `dim`.

    Example:
    ```mlir
    %y = dshard.all_gather %x "dp" dim = 0 : (tensor<32x32xf32>) -> tensor<64x32xf32>
    ```

    **Constraints:**
    - `dim` is a dimension of the operand; the result's `dim` is the
      operand's times the axis size (when the module has a mesh) and the
      other dimensions agree.
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$dim);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = [{
    $operand $axis `dim` `=` $dim attr-dict `:` functional-type($operand, $result)
  }];
}

def Shard_ReduceScatterOp : Shard_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduces over a mesh axis; rank i keeps block i of a dimension";
  let description = [{
    Example:
    ```mlir
    %y = dshard.reduce_scatter %x "dp" dim = 0 {kind = "sum"} : (tensor<64x32xf32>) -> tensor<32x32xf32>
    ```

    **Constraints:**
    - the operand's `dim` is the result's times the axis size, the other
      dimensions agree; `kind` is "sum", "max", "min" or "prod".
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$dim,
                       DefaultValuedStrAttr<StrAttr, "sum">:$kind);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = [{
    $operand $axis `dim` `=` $dim attr-dict `:` functional-type($operand, $result)
  }];
}

def Shard_AllToAllOp : Shard_CollectiveOp<"all_to_all"> {
  let summary = "Splits one dimension over a mesh axis and gathers another";
  let description = [{
    Block `j` of `split_dim` goes to rank `j`; the blocks received are
    concatenated along `concat_dim`.

    Example:
    ```mlir
    %y = dshard.all_to_all %x "tp" split_dim = 1, concat_dim = 0 : (tensor<8x16xf32>) -> tensor<16x8xf32>
    ```

    **Constraints:**
    - the result has the operand's shape with `split_dim` divided and
      `concat_dim` multiplied by the axis size.
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = [{
    $operand $axis `split_dim` `=` $split_dim `,` `concat_dim` `=` $concat_dim
    attr-dict `:` functional-type($operand, $result)
  }];
}

def Shard_BroadcastOp : Shard_CollectiveOp<"broadcast",
    [SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Sends one rank's tensor to every rank of a mesh axis";
  let description = [{
    Example:
    ```mlir
    %y = dshard.broadcast %x "pp" root = 0 : tensor<4xf32>
    ```

    **Constraints:**
    - `root` is non-negative and less than the axis size.
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$root);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = "$operand $axis `root` `=` $root attr-dict `:` type($result)";
}

def Shard_ShardSliceOp : Shard_CollectiveOp<"shard_slice"> {
  let summary = "Keeps this rank's block of a replicated tensor";
  let description = [{
    The local part of resharding a replicated dimension onto a mesh axis: no
    communication. With `groups = g`, the dimension is g blocks, and the
    rank keeps its part of each.

    Example:
    ```mlir
    %y = dshard.shard_slice %x "tp" dim = 0 {groups = 3} : (tensor<96x32xf32>) -> tensor<48x32xf32>
    ```

    **Constraints:**
    - the operand's `dim` is the result's times the axis size; the other
      dimensions agree; `groups` >= 1 divides the result's `dim`.
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$dim,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = [{
    $operand $axis `dim` `=` $dim attr-dict `:` functional-type($operand, $result)
  }];
}

def Shard_SendOp : Shard_Op<"send"> {
  let summary = "Sends a tensor to another rank of a mesh axis";
  let description = [{
    Pipeline transfer: to rank `peer` of `axis`, matched with the `recv` of
    the same `tag` there (the tag encodes the micro-batch and direction).

    Example:
    ```mlir
    dshard.send %x "pp" peer = 1 tag = 3 : tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Shard_Tensor:$operand, StrAttr:$axis, I64Attr:$peer,
                       I64Attr:$tag);
  let assemblyFormat = [{
    $operand $axis `peer` `=` $peer `tag` `=` $tag attr-dict `:` type($operand)
  }];
}

def Shard_RecvOp : Shard_Op<"recv"> {
  let summary = "Receives a tensor from another rank of a mesh axis";
  let description = [{
    Example:
    ```mlir
    %x = dshard.recv "pp" peer = 0 tag = 3 : tensor<4x16xf32>
    ```
  }];
  let arguments = (ins StrAttr:$axis, I64Attr:$peer, I64Attr:$tag);
  let results = (outs Shard_Tensor:$result);
  let assemblyFormat = [{
    $axis `peer` `=` $peer `tag` `=` $tag attr-dict `:` type($result)
  }];
}

def Shard_WaitOp : Shard_Op<"wait"> {
  let summary = "Waits for an asynchronous collective";
  let description = [{
    A collective with the attributes `async = 1` and `handle = h` starts on
    the communication thread and returns at once; `dshard.wait` with the same
    handle blocks until it is done. Computation between the two overlaps the
    communication. The operands are the collective's input and result: they
    stay alive (and untouched) until the wait.

    Example:
    ```mlir
    %w = dshard.all_gather %shard "dp" dim = 0 {async = 1, handle = 3} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    dshard.wait 3, %shard, %w : tensor<4x8xf32>, tensor<8x8xf32>
    ```
  }];
  let arguments = (ins I64Attr:$handle, Variadic<AnyRankedTensor>:$buffers);
  let assemblyFormat = [{
    $handle (`,` $buffers^ `:` type($buffers))? attr-dict
  }];
}

#endif // DTCC_DIALECTS_SHARD_IR_SHARDOPS_TD
