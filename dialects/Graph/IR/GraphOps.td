//===- GraphOps.td - dgraph operations ---------------------*- tablegen -*-===//
//
// The dgraph op set. Each op documents its semantics and a Constraints list
// that its verifier (generated or in GraphOps.cpp) checks exactly.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_TD
#define DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_TD

include "dialects/Graph/IR/GraphDialect.td"
include "dialects/Graph/IR/GraphInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Graph_FloatElement : AnyTypeOf<[F16, BF16, F32, F64]>;
def Graph_IntElement : AnyTypeOf<[I8, I16, I32, I64, UI8, UI16, UI32, UI64]>;
def Graph_NumericElement : AnyTypeOf<[Graph_FloatElement, Graph_IntElement]>;
def Graph_Element : AnyTypeOf<[Graph_NumericElement, I1]>;

def Graph_Tensor : StaticShapeTensorOf<[Graph_Element]>;
def Graph_FloatTensor : StaticShapeTensorOf<[Graph_FloatElement]>;
def Graph_NumericTensor : StaticShapeTensorOf<[Graph_NumericElement]>;
def Graph_IntTensor : StaticShapeTensorOf<[Graph_IntElement]>;
def Graph_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Graph_BoolTensor : StaticShapeTensorOf<[I1]>;
def Graph_LogicalTensor : StaticShapeTensorOf<[I1, Graph_IntElement]>;

//===----------------------------------------------------------------------===//
// Constants and state
//===----------------------------------------------------------------------===//

def Graph_ConstantOp : Graph_Op<"constant",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "A constant tensor";
  let description = [{
    Materializes a constant. The value may be a dense attribute or a
    `dense_resource` blob (how the frontend carries large tensors).

    Example:
    ```mlir
    %c = dgraph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```

    **Constraints:**
    - the value's type is the result type.
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Graph_VariableOp : Graph_Op<"variable", [Symbol]> {
  let summary = "A named piece of model state";
  let description = [{
    Declares model state at module level: a weight, an optimizer moment, a
    step counter. Functions read it with `dgraph.load` and replace its value
    with `dgraph.store`. The initial value is optional: a model imported for
    planning only (`--no-weights`) has shapes and no data. `trainable` marks
    the parameters that autodiff differentiates and the optimizer updates.

    Example:
    ```mlir
    dgraph.variable @fc1.weight : tensor<16x8xf32> = dense<0.5> {trainable}
    ```

    **Constraints:**
    - the type is a statically shaped tensor of a dgraph element type;
    - the initial value, when present, has exactly that type.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Graph_Tensor>:$type,
                       OptionalAttr<ElementsAttr>:$initial_value,
                       UnitAttr:$trainable);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Graph_LoadOp : Graph_Op<"load",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>,
     MemoryEffects<[MemRead]>]> {
  let summary = "Reads a variable";
  let description = [{
    Returns the current value of a `dgraph.variable`.

    Example:
    ```mlir
    %w = dgraph.load @fc1.weight : tensor<16x8xf32>
    ```

    **Constraints:**
    - the symbol names a `dgraph.variable` in the enclosing module;
    - the result type is the variable's type.
  }];
  let arguments = (ins FlatSymbolRefAttr:$variable);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$variable attr-dict `:` type($result)";
}

def Graph_StoreOp : Graph_Op<"store",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>,
     MemoryEffects<[MemWrite]>]> {
  let summary = "Replaces a variable's value";
  let description = [{
    Sets the value of a `dgraph.variable`; later loads see the new value.

    Example:
    ```mlir
    dgraph.store %w2, @fc1.weight : tensor<16x8xf32>
    ```

    **Constraints:**
    - the symbol names a `dgraph.variable` in the enclosing module;
    - the stored value's type is the variable's type.
  }];
  let arguments = (ins Graph_Tensor:$value, FlatSymbolRefAttr:$variable);
  let assemblyFormat = "$value `,` $variable attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

class Graph_UnaryOp<string mnemonic, Type type, string doc,
                    list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise, SameOperandsAndResultType,
           InferTypeOpInterface,
           DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>])> {
  let summary = "Elementwise " # doc;
  let description = [{
    Applies }] # doc # [{ to every element.

    Example:
    ```mlir
    %y = dgraph.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```

    **Constraints:**
    - operand and result have the same type.
  }];
  let arguments = (ins type:$operand);
  let results = (outs type:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
}

def Graph_NegOp : Graph_UnaryOp<"neg", Graph_NumericTensor, "negation"> {
  let hasFolder = 1;
}
def Graph_AbsOp : Graph_UnaryOp<"abs", Graph_NumericTensor, "absolute value"> {
  let hasFolder = 1;
}
def Graph_SignOp : Graph_UnaryOp<"sign", Graph_NumericTensor, "sign (-1, 0 or 1)">;
def Graph_ExpOp : Graph_UnaryOp<"exp", Graph_FloatTensor, "exponential">;
def Graph_LogOp : Graph_UnaryOp<"log", Graph_FloatTensor, "natural logarithm"> {
  let hasCanonicalizer = 1;
}
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", Graph_FloatTensor, "square root"> {
  let hasFolder = 1;
}
def Graph_RsqrtOp : Graph_UnaryOp<"rsqrt", Graph_FloatTensor, "reciprocal square root">;
def Graph_ReciprocalOp : Graph_UnaryOp<"reciprocal", Graph_FloatTensor, "reciprocal (1/x)">;
def Graph_TanhOp : Graph_UnaryOp<"tanh", Graph_FloatTensor, "hyperbolic tangent">;
def Graph_SigmoidOp : Graph_UnaryOp<"sigmoid", Graph_FloatTensor, "logistic sigmoid 1/(1+exp(-x))">;
def Graph_ReluOp : Graph_UnaryOp<"relu", Graph_NumericTensor, "rectifier max(x, 0)"> {
  let hasFolder = 1;
}
def Graph_SiluOp : Graph_UnaryOp<"silu", Graph_FloatTensor, "SiLU (swish) x*sigmoid(x)">;
def Graph_ErfOp : Graph_UnaryOp<"erf", Graph_FloatTensor, "error function">;
def Graph_SinOp : Graph_UnaryOp<"sin", Graph_FloatTensor, "sine">;
def Graph_CosOp : Graph_UnaryOp<"cos", Graph_FloatTensor, "cosine">;
def Graph_TanOp : Graph_UnaryOp<"tan", Graph_FloatTensor, "tangent">;
def Graph_AsinOp : Graph_UnaryOp<"asin", Graph_FloatTensor, "arcsine">;
def Graph_AcosOp : Graph_UnaryOp<"acos", Graph_FloatTensor, "arccosine">;
def Graph_AtanOp : Graph_UnaryOp<"atan", Graph_FloatTensor, "arctangent">;
def Graph_SinhOp : Graph_UnaryOp<"sinh", Graph_FloatTensor, "hyperbolic sine">;
def Graph_CoshOp : Graph_UnaryOp<"cosh", Graph_FloatTensor, "hyperbolic cosine">;
def Graph_AsinhOp : Graph_UnaryOp<"asinh", Graph_FloatTensor, "inverse hyperbolic sine">;
def Graph_AcoshOp : Graph_UnaryOp<"acosh", Graph_FloatTensor, "inverse hyperbolic cosine">;
def Graph_AtanhOp : Graph_UnaryOp<"atanh", Graph_FloatTensor, "inverse hyperbolic tangent">;
def Graph_FloorOp : Graph_UnaryOp<"floor", Graph_FloatTensor, "rounding down"> {
  let hasFolder = 1;
}
def Graph_CeilOp : Graph_UnaryOp<"ceil", Graph_FloatTensor, "rounding up"> {
  let hasFolder = 1;
}
def Graph_RoundOp : Graph_UnaryOp<"round", Graph_FloatTensor, "rounding to nearest, ties to even"> {
  let hasFolder = 1;
}
def Graph_NotOp : Graph_UnaryOp<"not", Graph_BoolTensor, "logical negation"> {
  let hasFolder = 1;
}

def Graph_GeluOp : Graph_Op<"gelu",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    Elementwise, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Elementwise Gaussian error linear unit";
  let description = [{
    `x * Phi(x)`: with `approximate = "none"` Phi is the standard normal CDF
    (`0.5 * (1 + erf(x / sqrt(2)))`), with `approximate = "tanh"` it is
    `0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`, as in ONNX Gelu-20.

    Example:
    ```mlir
    %y = dgraph.gelu %x {approximate = "tanh"} : tensor<4x8xf32>
    ```

    **Constraints:**
    - operand and result have the same type;
    - `approximate` is "none" or "tanh".
  }];
  let arguments = (ins Graph_FloatTensor:$operand,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_IsNanOp : Graph_Op<"is_nan", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise,
    TypesMatchWith<"result is an i1 tensor of the operand's shape",
                   "operand", "result", "getI1TensorLike($_self)">]> {
  let summary = "Elementwise test for NaN";
  let description = [{
    Example:
    ```mlir
    %m = dgraph.is_nan %x : tensor<4xf32>
    ```

    **Constraints:**
    - the result is an i1 tensor of the operand's shape.
  }];
  let arguments = (ins Graph_FloatTensor:$operand);
  let results = (outs Graph_BoolTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand)";
}

def Graph_IsInfOp : Graph_Op<"is_inf", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise,
    TypesMatchWith<"result is an i1 tensor of the operand's shape",
                   "operand", "result", "getI1TensorLike($_self)">]> {
  let summary = "Elementwise test for infinity";
  let description = [{
    True where the element is +inf (when `detect_positive`) or -inf (when
    `detect_negative`).

    Example:
    ```mlir
    %m = dgraph.is_inf %x {detect_negative = false} : tensor<4xf32>
    ```

    **Constraints:**
    - the result is an i1 tensor of the operand's shape.
  }];
  let arguments = (ins Graph_FloatTensor:$operand,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_positive,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_negative);
  let results = (outs Graph_BoolTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand)";
}

class Graph_BinaryOp<string mnemonic, Type type, string doc,
                     list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise, SameOperandsAndResultType,
           InferTypeOpInterface,
           DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>])> {
  let summary = "Elementwise " # doc;
  let description = [{
    Computes }] # doc # [{ of two tensors of one shape, element by element.
    Broadcasting is explicit: see `dgraph.broadcast_in_dim`.

    Example:
    ```mlir
    %z = dgraph.}] # mnemonic # [{ %x, %y : tensor<4x8xf32>
    ```

    **Constraints:**
    - both operands and the result have the same type.
  }];
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let hasFolder = 1;
}

def Graph_AddOp : Graph_BinaryOp<"add", Graph_NumericTensor, "sum", [Commutative]> {
  let hasCanonicalizer = 1;
}
def Graph_SubOp : Graph_BinaryOp<"sub", Graph_NumericTensor, "difference">;
def Graph_MulOp : Graph_BinaryOp<"mul", Graph_NumericTensor, "product", [Commutative]> {
  let hasCanonicalizer = 1;
}
def Graph_DivOp : Graph_BinaryOp<"div", Graph_NumericTensor,
    "quotient (integers truncate toward zero)">;
def Graph_RemOp : Graph_BinaryOp<"rem", Graph_NumericTensor,
    "remainder of truncated division (the sign of the dividend, like C fmod)">;
def Graph_PowOp : Graph_BinaryOp<"pow", Graph_NumericTensor, "power lhs^rhs"> {
  let hasCanonicalizer = 1;
}
def Graph_MaxOp : Graph_BinaryOp<"max", Graph_NumericTensor,
    "maximum (NaN if either is NaN)", [Commutative]>;
def Graph_MinOp : Graph_BinaryOp<"min", Graph_NumericTensor,
    "minimum (NaN if either is NaN)", [Commutative]>;
def Graph_AndOp : Graph_BinaryOp<"and", Graph_LogicalTensor,
    "logical (i1) or bitwise (integers) and", [Commutative]>;
def Graph_OrOp : Graph_BinaryOp<"or", Graph_LogicalTensor,
    "logical (i1) or bitwise (integers) or", [Commutative]>;
def Graph_XorOp : Graph_BinaryOp<"xor", Graph_LogicalTensor,
    "logical (i1) or bitwise (integers) exclusive or", [Commutative]>;
def Graph_ShiftLeftOp : Graph_BinaryOp<"shift_left", Graph_IntTensor,
    "bitwise left shift">;
def Graph_ShiftRightOp : Graph_BinaryOp<"shift_right", Graph_IntTensor,
    "bitwise right shift (logical for unsigned, arithmetic for signed)">;

class Graph_CompareOp<string mnemonic, string doc, list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat(traits, [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, Elementwise,
          SameTypeOperands,
          TypesMatchWith<"result is an i1 tensor of the operands' shape",
                         "lhs", "result", "getI1TensorLike($_self)">])> {
  let summary = "Elementwise comparison: " # doc;
  let description = [{
    Compares two tensors of one type element by element and returns an i1
    tensor: true where lhs }] # doc # [{ rhs. Any comparison with NaN is
    false.

    Example:
    ```mlir
    %m = dgraph.}] # mnemonic # [{ %x, %y : tensor<4xf32>
    ```

    **Constraints:**
    - both operands have the same type;
    - the result is an i1 tensor of their shape.
  }];
  let arguments = (ins Graph_Tensor:$lhs, Graph_Tensor:$rhs);
  let results = (outs Graph_BoolTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
  let hasFolder = 1;
}

def Graph_EqOp : Graph_CompareOp<"eq", "equals", [Commutative]>;
def Graph_LtOp : Graph_CompareOp<"lt", "is less than">;
def Graph_LeOp : Graph_CompareOp<"le", "is less than or equal to">;
def Graph_GtOp : Graph_CompareOp<"gt", "is greater than">;
def Graph_GeOp : Graph_CompareOp<"ge", "is greater than or equal to">;

def Graph_SelectOp : Graph_Op<"select", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    Elementwise,
    AllTypesMatch<["on_true", "on_false", "result"]>,
    TypesMatchWith<"condition is an i1 tensor of the result's shape",
                   "result", "condition", "getI1TensorLike($_self)">]> {
  let summary = "Elementwise choice between two tensors";
  let description = [{
    `result[i] = condition[i] ? on_true[i] : on_false[i]`.

    Example:
    ```mlir
    %z = dgraph.select %c, %x, %y : tensor<4xf32>
    ```

    **Constraints:**
    - `on_true`, `on_false` and the result have the same type;
    - the condition is an i1 tensor of that shape.
  }];
  let arguments = (ins Graph_BoolTensor:$condition, Graph_Tensor:$on_true,
                       Graph_Tensor:$on_false);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat =
      "$condition `,` $on_true `,` $on_false attr-dict `:` type($result)";
  let hasFolder = 1;
}

def Graph_CastOp : Graph_Op<"cast", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    Elementwise]> {
  let summary = "Elementwise conversion to another element type";
  let description = [{
    Converts each element: floats to integers truncate toward zero (NaN and
    out-of-range values are undefined, as in ONNX), any nonzero value to
    true, and booleans to 0 or 1.

    Example:
    ```mlir
    %y = dgraph.cast %x : tensor<4xf32> to tensor<4xi64>
    ```

    **Constraints:**
    - operand and result have the same shape.
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Graph_IotaOp : Graph_Op<"iota", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure]> {
  let summary = "Indices along one dimension";
  let description = [{
    `result[i0, ..., in] = i_dimension`, converted to the element type.

    Example:
    ```mlir
    %i = dgraph.iota dim = 1 : tensor<2x3xi64>
    ```

    **Constraints:**
    - `0 <= dim < rank(result)`.
  }];
  let arguments = (ins I64Attr:$dim);
  let results = (outs Graph_NumericTensor:$result);
  let assemblyFormat = "`dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_BroadcastInDimOp : Graph_Op<"broadcast_in_dim", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Broadcasts a tensor to a larger shape";
  let description = [{
    Maps operand dimension `i` to result dimension `dims[i]`; an operand
    dimension of size 1 is repeated, result dimensions not in `dims` are new.

    Example:
    ```mlir
    %b = dgraph.broadcast_in_dim %x, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    ```

    **Constraints:**
    - `dims` has one entry per operand dimension, strictly increasing, each in
      `[0, rank(result))`;
    - operand dimension `i` is 1 or equals result dimension `dims[i]`;
    - operand and result have the same element type.
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$dims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `dims` `=` $dims attr-dict `:` functional-type($operand, $result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_ReshapeOp : Graph_Op<"reshape", [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Reinterprets a tensor with another shape";
  let description = [{
    Keeps the elements in row-major order and changes the shape.

    Example:
    ```mlir
    %r = dgraph.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
    ```

    **Constraints:**
    - operand and result have the same element type and number of elements.
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type($operand, $result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_TransposeOp : Graph_Op<"transpose",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Permutes the dimensions of a tensor";
  let description = [{
    Result dimension `i` is operand dimension `perm[i]`.

    Example:
    ```mlir
    %t = dgraph.transpose %x, perm = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    ```

    **Constraints:**
    - `perm` is a permutation of `[0, rank)`;
    - the result shape is the permuted operand shape.
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$perm);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `perm` `=` $perm attr-dict `:` functional-type($operand, $result)
  }];
  let hasFolder = 1;
}

def Graph_SliceOp : Graph_Op<"slice",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Extracts a strided box";
  let description = [{
    Takes elements `start[d], start[d] + stride[d], ...` below `limit[d]` in
    every dimension `d`.

    Example:
    ```mlir
    %s = dgraph.slice %x, start = [0, 1], limit = [2, 3], stride = [1, 1]
        : (tensor<2x4xf32>) -> tensor<2x2xf32>
    ```

    **Constraints:**
    - `start`, `limit` and `stride` have one entry per dimension;
    - `0 <= start[d] <= limit[d] <= dim(d)` and `stride[d] >= 1`;
    - result dimension `d` is `ceil((limit[d] - start[d]) / stride[d])`.
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$start,
                       DenseI64ArrayAttr:$limit, DenseI64ArrayAttr:$stride);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` `start` `=` $start `,` `limit` `=` $limit `,` `stride` `=` $stride
    attr-dict `:` functional-type($operand, $result)
  }];
  let hasFolder = 1;
}

def Graph_ReverseOp : Graph_Op<"reverse",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Reverses the order of elements along dimensions";
  let description = [{
    Example:
    ```mlir
    %r = dgraph.reverse %x, dims = [0] : tensor<4x2xf32>
    ```

    **Constraints:**
    - every entry of `dims` is a distinct dimension in `[0, rank)`.
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$dims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand `,` `dims` `=` $dims attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_ConcatOp : Graph_Op<"concat",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Joins tensors along a dimension";
  let description = [{
    Example:
    ```mlir
    %c = dgraph.concat %a, %b dim = 0 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
    ```

    **Constraints:**
    - at least one operand; all have the same element type and rank;
    - `0 <= dim < rank` and all other dimensions agree;
    - the result's `dim` is the sum of the operands'.
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$operands, I64Attr:$dim);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operands `dim` `=` $dim attr-dict `:` functional-type($operands, $result)
  }];
  let hasFolder = 1;
}

def Graph_PadOp : Graph_Op<"pad",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Pads a tensor with a constant or copies of its own elements";
  let description = [{
    Adds `low[d]` elements before and `high[d]` after dimension `d`.
    Negative amounts remove elements. `mode` says what the new elements are
    (as ONNX Pad and numpy.pad):

    - `constant` (the default): the scalar `value`;
    - `edge`: the nearest element of the operand (the edge repeated);
    - `reflect`: the operand mirrored at its edges without repeating the
      edge (`[a b c]` padded by 2 is `c b a b c b a`), repeatedly when the
      padding is longer than the dimension;
    - `wrap`: the operand repeated periodically (`c a b c a b`... ).

    `value` is only read in `constant` mode.

    Example:
    ```mlir
    %p = dgraph.pad %x, %zero, low = [0, 1], high = [0, 2]
        : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x6xf32>
    %r = dgraph.pad %x, %zero, low = [0, 2], high = [0, 2] {mode = "reflect"}
        : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x7xf32>
    ```

    **Constraints:**
    - `value` is a rank-0 tensor of the operand's element type;
    - `low` and `high` have one entry per dimension;
    - every result dimension `low[d] + dim(d) + high[d]` is non-negative;
    - `mode` is "constant", "edge", "reflect" or "wrap";
    - outside `constant` mode, a dimension that is padded (`low[d] > 0` or
      `high[d] > 0`) is not empty.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_Tensor:$value,
                       DenseI64ArrayAttr:$low, DenseI64ArrayAttr:$high,
                       DefaultValuedStrAttr<StrAttr, "constant">:$mode);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $value `,` `low` `=` $low `,` `high` `=` $high attr-dict `:`
    functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_GatherOp : Graph_Op<"gather",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Gathers slices along an axis by index (embedding lookup)";
  let description = [{
    ONNX Gather: `result[i.., j.., k..] = operand[i.., indices[j..], k..]`
    with `i..` the dimensions before `axis`. Negative indices count from the
    end; an index out of range is a run-time error.

    Example:
    ```mlir
    %e = dgraph.gather %table, %ids axis = 0
        : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
    ```

    **Constraints:**
    - `0 <= axis < rank(operand)`;
    - the result shape is `operand[:axis] + indices + operand[axis+1:]`.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_IndexTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `axis` `=` $axis attr-dict `:`
    functional-type(operands, $result)
  }];
  let hasFolder = 1;
}

def Graph_GatherElementsOp : Graph_Op<"gather_elements",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure,
     DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>, AllShapesMatch<["indices", "result"]>,
     AllElementTypesMatch<["operand", "result"]>]> {
  let summary = "Gathers single elements along an axis (take_along_axis)";
  let description = [{
    ONNX GatherElements: `result[i][j][k] = operand[indices[i][j][k]][j][k]`
    for `axis = 0`, and likewise for other axes. Negative indices count from
    the end.

    Example:
    ```mlir
    %g = dgraph.gather_elements %x, %idx axis = 1
        : (tensor<4x10xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
    ```

    **Constraints:**
    - operand and indices have the same rank and `0 <= axis < rank`;
    - the result has the indices' shape and the operand's element type.
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_IndexTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = [{
    $operand `,` $indices `axis` `=` $axis attr-dict `:`
    functional-type(operands, $result)
  }];
  let hasVerifier = 1;
}

def Graph_ScatterAddOp : Graph_Op<"scatter_add",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Adds slices into a zero tensor by index (the VJP of gather)";
  let description = [{
    The transpose of `dgraph.gather`: starts from zeros of the result type
    and adds `updates[i.., j.., k..]` into `result[i.., indices[j..], k..]`.
    `dim_size` is the size of the result's `axis` dimension.

    Example:
    ```mlir
    %g = dgraph.scatter_add %upd, %ids axis = 0, dim_size = 100
        : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<100x16xf32>
    ```

    **Constraints:**
    - `updates` has shape `result[:axis] + indices + result[axis+1:]`.
  }];
  let arguments = (ins Graph_NumericTensor:$updates, Graph_IndexTensor:$indices,
                       I64Attr:$axis, I64Attr:$dim_size);
  let results = (outs Graph_NumericTensor:$result);
  let assemblyFormat = [{
    $updates `,` $indices `axis` `=` $axis `,` `dim_size` `=` $dim_size attr-dict
    `:` functional-type(operands, $result)
  }];
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Graph_ReduceOp<string mnemonic, Type type, string doc>
    : Graph_Op<mnemonic, [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>,
                          DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>]> {
  let summary = "Reduces dimensions by " # doc;
  let description = [{
    Reduces the listed dimensions by }] # doc # [{ and removes them from
    the shape (the frontend reshapes to keep them).

    Example:
    ```mlir
    %s = dgraph.}] # mnemonic # [{ %x, dims = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
    ```

    **Constraints:**
    - every entry of `dims` is a distinct dimension in `[0, rank)`;
    - the result is the operand's type without those dimensions.
  }];
  let arguments = (ins type:$operand, DenseI64ArrayAttr:$dims);
  let results = (outs type:$result);
  let assemblyFormat = [{
    $operand `,` `dims` `=` $dims attr-dict `:` functional-type($operand, $result)
  }];
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Graph_ReduceSumOp : Graph_ReduceOp<"reduce_sum", Graph_NumericTensor, "summation">;

def Graph_SumSquaresOp : Graph_Op<"sum_squares", [Pure]> {
  let summary = "Sum of the squares of the elements over dimensions";
  let description = [{
    `reduce_sum(mul(x, x), dims)` in one pass, as a gradient's squared norm
    takes it: each element is widened to its accumulation type (f32 for
    f32, f16 and bf16; f64 for f64), squared and summed in the order the
    backends sum reduce_sum's operand, so the result is that of the two ops
    on the widened operand. dtcc-fold-narrow-reads makes it from them,
    after sharding (it has no sharding rule and no VJP); a result may be
    f32 for an f16 or bf16 operand (the sum of the squares of its cast).

    Example:
    ```mlir
    %s = dgraph.sum_squares %g, dims = [0, 1] : (tensor<4x8xbf16>) -> tensor<f32>
    ```

    **Constraints:**
    - every entry of `dims` is a distinct dimension in `[0, rank)`;
    - the result has the operand's shape without those dimensions, and its
      element type (or f32 for f16 and bf16).
  }];
  let arguments = (ins Graph_FloatTensor:$operand, DenseI64ArrayAttr:$dims);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $operand `,` `dims` `=` $dims attr-dict `:` functional-type($operand, $result)
  }];
  let hasVerifier = 1;
}
def Graph_ReduceMaxOp : Graph_ReduceOp<"reduce_max", Graph_NumericTensor, "maximum">;
def Graph_ReduceMinOp : Graph_ReduceOp<"reduce_min", Graph_NumericTensor, "minimum">;
def Graph_ReduceProdOp : Graph_ReduceOp<"reduce_prod", Graph_NumericTensor, "product">;

class Graph_ArgReduceOp<string mnemonic, string doc>
    : Graph_Op<mnemonic, [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Index of the " # doc # " along a dimension";
  let description = [{
    Returns, as i64, the index of the }] # doc # [{ along `dim`, which is
    removed from the shape. Ties pick the first index, or the last with
    `select_last_index`.

    Example:
    ```mlir
    %i = dgraph.}] # mnemonic # [{ %x, dim = 1 : (tensor<4x8xf32>) -> tensor<4xi64>
    ```

    **Constraints:**
    - `0 <= dim < rank`; the result is i64 with `dim` removed.
  }];
  let arguments = (ins Graph_NumericTensor:$operand, I64Attr:$dim,
                       UnitAttr:$select_last_index);
  let results = (outs StaticShapeTensorOf<[I64]>:$result);
  let assemblyFormat = [{
    $operand `,` `dim` `=` $dim attr-dict `:` functional-type($operand, $result)
  }];
}

def Graph_ArgMaxOp : Graph_ArgReduceOp<"argmax", "maximum">;
def Graph_ArgMinOp : Graph_ArgReduceOp<"argmin", "minimum">;

def Graph_CumSumOp : Graph_Op<"cumsum",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Cumulative sum along a dimension";
  let description = [{
    `exclusive` leaves out the element itself; `reverse` sums from the end.

    Example:
    ```mlir
    %c = dgraph.cumsum %x, dim = 0 : tensor<5xf32>
    ```

    **Constraints:**
    - `0 <= dim < rank`.
  }];
  let arguments = (ins Graph_NumericTensor:$operand, I64Attr:$dim,
                       UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Graph_NumericTensor:$result);
  let assemblyFormat = "$operand `,` `dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and neural-network ops
//===----------------------------------------------------------------------===//

def Graph_MatmulOp : Graph_Op<"matmul",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    DeclareOpInterfaceMethods<Graph_CostOpInterface>]> {
  let summary = "Batched matrix product with broadcast batch dimensions";
  let description = [{
    Multiplies the last two dimensions: `lhs[..., m, k] x rhs[..., k, n]`
    (each side optionally transposed in its last two dimensions). The batch
    dimensions (all but the last two) broadcast as NumPy's `matmul`: aligned
    from the right, a dimension that one side lacks or has of size 1 takes
    the other side's size. A dense layer `x[b, s, h] x w[h, f]`, its
    transpose `w[f, s] x x[b, h, s]` and `a[b, 1, m, k] x c[h, k, n]` are
    each one op; kernels read a broadcast operand with batch stride 0,
    never copying it. (ONNX's 1-D operands are reshaped by the importer.)

    Example:
    ```mlir
    %y = dgraph.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
    %t = dgraph.matmul %v, %x : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
    %s = dgraph.matmul %q, %k {transpose_rhs}
        : (tensor<2x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<2x4x8x8xf32>
    ```

    **Constraints:**
    - both operands have rank >= 2 and the same element type;
    - each pair of batch dimensions, aligned from the right, is equal or
      one of them is 1;
    - the contracted dimensions agree;
    - the result is `[broadcast batch..., m, n]`, of rank
      `max(rank(lhs), rank(rhs))`.
  }];
  let arguments = (ins Graph_NumericTensor:$lhs, Graph_NumericTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Graph_NumericTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, $result)
  }];
  let hasCanonicalizer = 1;
}

def Graph_SoftmaxOp : Graph_Op<"softmax",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Softmax along a dimension";
  let description = [{
    `exp(x - max) / sum(exp(x - max))` along `dim`.

    Example:
    ```mlir
    %p = dgraph.softmax %x, dim = 1 : tensor<4x8xf32>
    ```

    **Constraints:**
    - `0 <= dim < rank`.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, I64Attr:$dim);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand `,` `dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_LogSoftmaxOp : Graph_Op<"log_softmax",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "Log of the softmax along a dimension";
  let description = [{
    `x - max - log(sum(exp(x - max)))` along `dim`.

    Example:
    ```mlir
    %p = dgraph.log_softmax %x, dim = 1 : tensor<4x8xf32>
    ```

    **Constraints:**
    - `0 <= dim < rank`.
  }];
  let arguments = (ins Graph_FloatTensor:$operand, I64Attr:$dim);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand `,` `dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Graph_LayerNormOp : Graph_Op<"layer_norm",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Layer normalization over the trailing dimensions";
  let description = [{
    Normalizes over dimensions `axis..rank-1`:
    `y = (x - mean) * rstd * scale + bias` with
    `rstd = 1 / sqrt(var + epsilon)`. Also returns `mean` and `rstd`, shaped
    like `x[:axis]`, which the backward pass reuses. `bias` is optional.

    Example:
    ```mlir
    %y, %mean, %rstd = dgraph.layer_norm %x, %g, %b axis = 2, epsilon = 1.0e-05
        : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
        -> (tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
    ```

    **Constraints:**
    - `0 <= axis < rank(x)`;
    - `scale` (and `bias`) have shape `x[axis:]` and x's element type;
    - `y` has x's type; `mean` and `rstd` have shape `x[:axis]` and x's
      element type or a wider float (a bf16 or f16 norm keeps f32
      statistics: dtcc-graph-mixed-precision).
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$scale,
                       Optional<Graph_FloatTensor>:$bias, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result, Graph_FloatTensor:$mean,
                      Graph_FloatTensor:$rstd);
  let assemblyFormat = [{
    $operand `,` $scale (`,` $bias^)? `axis` `=` $axis `,` `epsilon` `=` $epsilon
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Statistics may be wider than x (f32 for a half norm).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Graph_RmsNormOp : Graph_Op<"rms_norm",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Root-mean-square normalization over the trailing dimensions";
  let description = [{
    `y = x * rstd * scale` with `rstd = 1 / sqrt(mean(x^2) + epsilon)` over
    dimensions `axis..rank-1` (Llama's RMSNorm). Also returns `rstd`, shaped
    like `x[:axis]`.

    Example:
    ```mlir
    %y, %rstd = dgraph.rms_norm %x, %g axis = 2, epsilon = 1.0e-05
        : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
    ```

    **Constraints:**
    - `0 <= axis < rank(x)`;
    - `scale` has shape `x[axis:]` and x's element type;
    - `y` has x's type; `rstd` has shape `x[:axis]` and x's element type or
      a wider float (as layer_norm's statistics).
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$scale,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result, Graph_FloatTensor:$rstd);
  let assemblyFormat = [{
    $operand `,` $scale `axis` `=` $axis `,` `epsilon` `=` $epsilon
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Statistics may be wider than x (f32 for a half norm).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Graph_CrossEntropyOp : Graph_Op<"cross_entropy",
    [DeclareOpInterfaceMethods<Graph_ShardableOpInterface>, Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Per-sample softmax cross-entropy with class labels";
  let description = [{
    For logits `[n, c]` and integer labels `[n]`,
    `loss[i] = logsumexp(logits[i]) - logits[i, labels[i]]`, and 0 where
    `labels[i] == ignore_index`. The caller reduces (mean over the samples
    that count, or sum). A label outside `[0, c)` that is not the ignored one
    is a run-time error.

    Example:
    ```mlir
    %l = dgraph.cross_entropy %logits, %labels
        : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<16xf32>
    ```

    Half-precision logits may give an f32 loss: the loss of their f32 cast,
    computed in f32 as for it (dtcc-fold-narrow-reads reads the logits
    without that cast).

    **Constraints:**
    - logits have rank 2; labels have rank 1 and the logits' first dimension;
    - the result is `[n]` of the logits' element type, or f32 for f16 and
      bf16 logits.
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, $result)
  }];
  let extraClassDeclaration = [{
    /// The loss may be f32 for half-precision logits.
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

include "dialects/Graph/IR/GraphTrainingOps.td"
include "dialects/Graph/IR/GraphConvOps.td"
include "dialects/Graph/IR/GraphNormPoolOps.td"
include "dialects/Graph/IR/GraphIndexingOps.td"
include "dialects/Graph/IR/GraphFusionOps.td"

#endif // DTCC_DIALECTS_GRAPH_IR_GRAPHOPS_TD
