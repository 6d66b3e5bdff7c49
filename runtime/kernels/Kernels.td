//===- Kernels.td - the kernel signatures of the runtime ---*- tablegen -*-===//
//
// The contract between the compiler and the runtime: every kernel a program
// may call, with its inputs and outputs (element types, ranks, optional and
// variadic ones), its attributes (kind, required or defaulted, allowed
// values) and the relations between its operands. dtcc-kernel-tblgen
// generates from it the table that the lowering checks every emitted
// kernel call against (passes/Lowering/LowerToExec.cpp), that both
// backends' registries check every instruction against before its factory
// binds it (runtime/exec/Kernel.h), and whose defaults the planner's
// program model reads attributes with (planner/ProgramModel.cpp). See
// docs/architecture.md, "The compiler/runtime contract".
//
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

/// One runtime element type: `enumerator` names runtime::DType's.
class DType<string enumerator> {
  string Enumerator = enumerator;
}
def F16 : DType<"kF16">;
def BF16 : DType<"kBF16">;
def F32 : DType<"kF32">;
def F64 : DType<"kF64">;
def I8 : DType<"kI8">;
def I16 : DType<"kI16">;
def I32 : DType<"kI32">;
def I64 : DType<"kI64">;
def U8 : DType<"kU8">;
def U16 : DType<"kU16">;
def U32 : DType<"kU32">;
def U64 : DType<"kU64">;
def I1 : DType<"kBool">;

/// A set of element types an operand may have.
class ElementTypes<list<DType> dtypes> {
  list<DType> DTypes = dtypes;
}
def FloatElement : ElementTypes<[F16, BF16, F32, F64]>;
def IntElement : ElementTypes<[I8, I16, I32, I64, U8, U16, U32, U64]>;
def NumericElement
    : ElementTypes<!listconcat(FloatElement.DTypes, IntElement.DTypes)>;
def AnyElement : ElementTypes<!listconcat(NumericElement.DTypes, [I1])>;
def IndexElement : ElementTypes<[I32, I64]>;
def BoolElement : ElementTypes<[I1]>;
/// A fused region's buffers: floats, and the masks its comparisons make.
def FloatOrBoolElement : ElementTypes<!listconcat(FloatElement.DTypes, [I1])>;
def LogicalElement : ElementTypes<!listconcat([I1], IntElement.DTypes)>;
def F32Element : ElementTypes<[F32]>;
/// A row statistic kept in the kernels' accumulator type (attention's
/// logsumexp: f32, or f64 for f64 operands).
def AccumulatorElement : ElementTypes<[F32, F64]>;
def I64Element : ElementTypes<[I64]>;
def AxisIndexElement : ElementTypes<[I32, I64]>;

//===----------------------------------------------------------------------===//
// Operands
//===----------------------------------------------------------------------===//

/// An input or output buffer: its name (the dgraph operand's), its element
/// types and its rank (-1: any). Only the last input may be Optional or
/// Variadic (the generator checks).
class Tensor<string name, ElementTypes types, int rank = -1> {
  string Name = name;
  ElementTypes Types = types;
  int Rank = rank;
  bit IsOptional = 0;
  bit IsVariadic = 0;
  bit IsScalar = 0;
  bit IsRowStrided = 0;
}
/// Present or not (dgraph.layer_norm's bias, dgraph.dropout's offsets).
class Optional<Tensor t> : Tensor<t.Name, t.Types, t.Rank> {
  let IsOptional = 1;
}
/// One element of any rank and strides (a learning rate, a step): the
/// kernels read it as a scalar.
class Scalar<string name, ElementTypes types> : Tensor<name, types> {
  let IsScalar = 1;
}
/// A view the kernel reads or writes through its strides: any non-negative
/// strides with the last dimension's 1 (rows of adjacent elements). The
/// lowering passes transposes and slices to such operands as views instead
/// of copies (attention's heads: passes/Lowering/LowerToExec.cpp). Other
/// operands are contiguous, but for elementwise kernels' inputs (broadcast
/// views).
class RowStrided<Tensor t> : Tensor<t.Name, t.Types, t.Rank> {
  let IsRowStrided = 1;
}
/// Any number, zero included (dgraph.concat's operands, dshard.wait's).
class Variadic<Tensor t> : Tensor<t.Name, t.Types, t.Rank> {
  let IsVariadic = 1;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

/// An attribute of the instruction. `Kind` is KernelAttrKind's enumerator;
/// `From` is the name on the op the lowering reads it from when it differs
/// (dshard's `axis` is the kernels' `axes`).
class KernelAttr<string name, string kind> {
  string Name = name;
  string Kind = kind;
  bit Required = 1;
  bit HasDefault = 0;
  string Default = "";
  list<string> Values = [];
  string From = "";
}
/// An i64.
class IntAttr<string name> : KernelAttr<name, "kInt">;
/// An f64 (an integer is read as its value).
class FloatAttr<string name> : KernelAttr<name, "kFloat">;
/// A string.
class StringAttr<string name> : KernelAttr<name, "kString">;
/// A 0/1 integer with a default (dgraph's BoolAttr).
class BoolAttr<string name> : KernelAttr<name, "kBool">;
/// Present (the integer 1) or absent (0): dgraph's UnitAttr.
class FlagAttr<string name> : KernelAttr<name, "kBool"> {
  let Required = 0;
  let HasDefault = 1;
  let Default = "0";
}
/// An i64 array; absent reads as empty (a program may leave out empty
/// arrays: the kernels' shape checks decide).
class IntsAttr<string name> : KernelAttr<name, "kInts"> {
  let Required = 0;
}
/// An f64 array.
class FloatsAttr<string name> : KernelAttr<name, "kFloats">;
/// A list of mesh axis names: a string list, or one string of
/// comma-separated names.
class AxesAttr<string name> : KernelAttr<name, "kStrings">;
/// A string that is one of `values`.
class EnumAttr<string name, list<string> values> : KernelAttr<name, "kString"> {
  let Values = values;
}
/// `a`, read as `value` when absent.
class Defaulted<KernelAttr a, string value> : KernelAttr<a.Name, a.Kind> {
  let Required = 0;
  let HasDefault = 1;
  let Default = value;
  let Values = a.Values;
  let From = a.From;
}
/// `a`, which may be absent (the kernel then does without it).
class OptionalAttr<KernelAttr a> : KernelAttr<a.Name, a.Kind> {
  let Required = 0;
  let Values = a.Values;
  let From = a.From;
}
/// `a`, read from the op's attribute `from`.
class Renamed<KernelAttr a, string from> : KernelAttr<a.Name, a.Kind> {
  let Required = a.Required;
  let HasDefault = a.HasDefault;
  let Default = a.Default;
  let Values = a.Values;
  let From = from;
}

//===----------------------------------------------------------------------===//
// Relations between operands
//===----------------------------------------------------------------------===//

/// `Kind` is KernelRelationKind's enumerator; operands by name (an absent
/// optional one is left out).
class Relation<string kind, list<string> operands> {
  string Kind = kind;
  list<string> Operands = operands;
}
/// Same element type and shape.
class SameType<list<string> operands> : Relation<"kSameType", operands>;
class SameElementType<list<string> operands>
    : Relation<"kSameElementType", operands>;
class SameShape<list<string> operands> : Relation<"kSameShape", operands>;

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// A kernel of the runtime. `Source` is the op the lowering emits it for
/// ("" for kernels the lowering makes itself, like `copy`, or that no op
/// emits); `Backends` lists the devices that implement it, "cpu" and
/// "cuda" (a test checks this against their registries).
class Kernel<string name> {
  string Name = name;
  string Summary = "";
  string Source = "";
  list<Tensor> Inputs = [];
  list<Tensor> Outputs = [];
  list<KernelAttr> Attrs = [];
  list<Relation> Relations = [];
  list<string> Backends = ["cpu", "cuda"];
}

// The collectives' attributes besides their own: the phase of the step
// they run in (dtcc-shard-partition, dtcc-shard-pipeline; for the
// planner's report), and `async` + `handle` for the ones that a later
// `wait` finishes (dtcc-shard-overlap).
defvar CollectiveAttrs = [OptionalAttr<StringAttr<"phase">>, FlagAttr<"async">,
                          OptionalAttr<IntAttr<"handle">>];

//===----------------------------------------------------------------------===//
// The lowering's own kernel
//===----------------------------------------------------------------------===//

def : Kernel<"copy"> {
  let Summary = "Copies a tensor (a strided view) into a contiguous buffer";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Relations = [SameType<["operand", "result"]>];
}

// An offloaded optimizer step (--offload optimizer) reads gradients, and
// writes parameters, across the device's and the host's memory: the CPU
// backend copies between its two sets of arenas, the CUDA backend on a copy
// stream between device memory and pinned host memory.
def : Kernel<"copy_to_host"> {
  let Summary = "Copies a device buffer into a host buffer";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"copy_to_device"> {
  let Summary = "Copies a host buffer into a device buffer";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Relations = [SameType<["operand", "result"]>];
}

//===----------------------------------------------------------------------===//
// dgraph ops: one kernel each, of the op's name
//===----------------------------------------------------------------------===//

def : Kernel<"attention"> {
  let Summary = "Scaled dot-product attention, tile by tile (FlashAttention)";
  let Source = "dgraph.attention";
  let Inputs = [
    RowStrided<Tensor<"query", FloatElement>>,
    RowStrided<Tensor<"key", FloatElement>>,
    RowStrided<Tensor<"value", FloatElement>>,
    Optional<Tensor<"mask", FloatElement>>
  ];
  let Outputs = [RowStrided<Tensor<"result", FloatElement>>,
                 Tensor<"logsumexp", AccumulatorElement>];
  let Attrs = [FloatAttr<"scale">, FlagAttr<"causal">];
  let Relations = [SameElementType<["query", "key", "value", "result"]>];
}

def : Kernel<"attention_grad"> {
  let Summary = "Gradient of attention, recomputing the probabilities tile by tile";
  let Source = "dgraph.attention_grad";
  let Inputs = [
    RowStrided<Tensor<"query", FloatElement>>,
    RowStrided<Tensor<"key", FloatElement>>,
    RowStrided<Tensor<"value", FloatElement>>,
    RowStrided<Tensor<"out", FloatElement>>,
    Tensor<"logsumexp", AccumulatorElement>,
    RowStrided<Tensor<"dout", FloatElement>>,
    Optional<Tensor<"mask", FloatElement>>
  ];
  let Outputs = [RowStrided<Tensor<"dquery", FloatElement>>,
                 RowStrided<Tensor<"dkey", FloatElement>>,
                 RowStrided<Tensor<"dvalue", FloatElement>>];
  let Attrs = [FloatAttr<"scale">, FlagAttr<"causal">];
  let Relations = [SameType<["query", "dquery"]>, SameType<["key", "dkey"]>,
                   SameType<["value", "dvalue"]>, SameType<["out", "dout"]>];
}

def : Kernel<"abs"> {
  let Summary = "Elementwise absolute value";
  let Source = "dgraph.abs";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"acos"> {
  let Summary = "Elementwise arccosine";
  let Source = "dgraph.acos";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"acosh"> {
  let Summary = "Elementwise inverse hyperbolic cosine";
  let Source = "dgraph.acosh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"adamw"> {
  let Summary = "One AdamW update of a parameter";
  let Source = "dgraph.adamw";
  let Inputs = [
    Tensor<"param", FloatElement>,
    Tensor<"grad", FloatElement>,
    Tensor<"m", FloatElement>,
    Tensor<"v", FloatElement>,
    Scalar<"lr", F32Element>,
    Scalar<"step", I64Element>,
    Scalar<"grad_scale", F32Element>
  ];
  // `rounded`: the new parameter rounded to a compute-type copy of it
  // (dtcc-lower-to-exec's rounded-copies; the CPU kernel takes it).
  let Outputs = [
    Tensor<"new_param", FloatElement>,
    Tensor<"new_m", FloatElement>,
    Tensor<"new_v", FloatElement>,
    Optional<Tensor<"rounded", FloatElement>>
  ];
  let Attrs = [
    FloatAttr<"beta1">,
    FloatAttr<"beta2">,
    FloatAttr<"epsilon">,
    FloatAttr<"weight_decay">
  ];
  // The gradient may be bf16 or f16 for an f32 parameter (the backends
  // check the pair).
  let Relations = [
    SameType<["param", "m", "v", "new_param", "new_m", "new_v"]>,
    SameShape<["param", "grad"]>
  ];
}

def : Kernel<"add"> {
  let Summary = "Elementwise sum";
  let Source = "dgraph.add";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"and"> {
  let Summary = "Elementwise logical (i1) or bitwise (integers) and";
  let Source = "dgraph.and";
  let Inputs = [Tensor<"lhs", LogicalElement>, Tensor<"rhs", LogicalElement>];
  let Outputs = [Tensor<"result", LogicalElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"argmax"> {
  let Summary = "Index of the maximum along a dimension";
  let Source = "dgraph.argmax";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", I64Element>];
  let Attrs = [IntAttr<"dim">, FlagAttr<"select_last_index">];
}

def : Kernel<"argmin"> {
  let Summary = "Index of the minimum along a dimension";
  let Source = "dgraph.argmin";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", I64Element>];
  let Attrs = [IntAttr<"dim">, FlagAttr<"select_last_index">];
}

def : Kernel<"asin"> {
  let Summary = "Elementwise arcsine";
  let Source = "dgraph.asin";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"asinh"> {
  let Summary = "Elementwise inverse hyperbolic sine";
  let Source = "dgraph.asinh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"atan"> {
  let Summary = "Elementwise arctangent";
  let Source = "dgraph.atan";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"atanh"> {
  let Summary = "Elementwise inverse hyperbolic tangent";
  let Source = "dgraph.atanh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"avg_pool"> {
  let Summary = "Average over sliding windows";
  let Source = "dgraph.avg_pool";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"kernel">,
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    FlagAttr<"ceil_mode">,
    FlagAttr<"count_include_pad">
  ];
}

def : Kernel<"avg_pool_grad"> {
  let Summary = "Gradient of average pooling";
  let Source = "dgraph.avg_pool_grad";
  let Inputs = [Tensor<"dy", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"kernel">,
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    FlagAttr<"ceil_mode">,
    FlagAttr<"count_include_pad">
  ];
}

def : Kernel<"batch_norm"> {
  let Summary = "Normalizes each channel with given statistics";
  let Source = "dgraph.batch_norm";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"bias", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"var", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [FloatAttr<"epsilon">, FlagAttr<"training">];
}

def : Kernel<"batch_norm_grad"> {
  let Summary = "Gradient of training-mode batch normalization with respect to x";
  let Source = "dgraph.batch_norm_grad";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"dy", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"var", FloatElement>,
    Tensor<"stats", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [FloatAttr<"epsilon">, IntAttr<"count">];
}

def : Kernel<"batch_norm_grad_stats"> {
  let Summary = "Per-channel sums the gradient of batch normalization needs";
  let Source = "dgraph.batch_norm_grad_stats";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
}

def : Kernel<"batch_norm_stats"> {
  let Summary = "Per-channel sums of shifted values and of their squares";
  let Source = "dgraph.batch_norm_stats";
  let Inputs = [Tensor<"operand", FloatElement>, Tensor<"shift", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
}

def : Kernel<"batch_norm_update"> {
  let Summary = "The running statistics of batch normalization after a batch";
  let Source = "dgraph.batch_norm_update";
  let Inputs = [
    Tensor<"running_mean", FloatElement>,
    Tensor<"running_var", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"var", FloatElement>
  ];
  let Outputs = [
    Tensor<"new_mean", FloatElement>,
    Tensor<"new_var", FloatElement>
  ];
  let Attrs = [FloatAttr<"momentum">, FloatAttr<"var_scale">];
  let Relations = [
    SameType<["running_mean", "running_var", "mean", "var", "new_mean", "new_var"]>
  ];
}

def : Kernel<"broadcast_in_dim"> {
  let Summary = "Broadcasts a tensor to a larger shape";
  let Source = "dgraph.broadcast_in_dim";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"cast"> {
  let Summary = "Elementwise conversion to another element type";
  let Source = "dgraph.cast";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
}

def : Kernel<"ceil"> {
  let Summary = "Elementwise rounding up";
  let Source = "dgraph.ceil";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"concat"> {
  let Summary = "Joins tensors along a dimension";
  let Source = "dgraph.concat";
  let Inputs = [Variadic<Tensor<"operands", AnyElement>>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntAttr<"dim">];
}

def : Kernel<"conv"> {
  let Summary = "N-d convolution (cross-correlation) with groups";
  let Source = "dgraph.conv";
  let Inputs = [Tensor<"input", FloatElement>, Tensor<"filter", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    IntAttr<"groups">
  ];
}

def : Kernel<"conv_filter_grad"> {
  let Summary = "Gradient of a convolution with respect to its filter";
  let Source = "dgraph.conv_filter_grad";
  let Inputs = [Tensor<"input", FloatElement>, Tensor<"grad", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    IntAttr<"groups">
  ];
}

def : Kernel<"conv_input_grad"> {
  let Summary = "Gradient of a convolution with respect to its input (transposed convolution)";
  let Source = "dgraph.conv_input_grad";
  let Inputs = [Tensor<"grad", FloatElement>, Tensor<"filter", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    IntAttr<"groups">
  ];
}

def : Kernel<"cos"> {
  let Summary = "Elementwise cosine";
  let Source = "dgraph.cos";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"cosh"> {
  let Summary = "Elementwise hyperbolic cosine";
  let Source = "dgraph.cosh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"cross_entropy"> {
  let Summary = "Per-sample softmax cross-entropy with class labels; the loss in the logits' type, or f32 for f16 and bf16 logits (computed in f32)";
  let Source = "dgraph.cross_entropy";
  let Inputs = [Tensor<"logits", FloatElement>, Tensor<"labels", IndexElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [Defaulted<IntAttr<"ignore_index">, "-100">];
}

def : Kernel<"cross_entropy_grad"> {
  let Summary = "Gradient of per-sample softmax cross-entropy, in the logits' type; dloss in that type, or f32 for f16 and bf16 logits (computed in f32, rounded once)";
  let Source = "dgraph.cross_entropy_grad";
  let Inputs = [
    Tensor<"logits", FloatElement>,
    Tensor<"labels", IndexElement>,
    Tensor<"dloss", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [Defaulted<IntAttr<"ignore_index">, "-100">];
}

def : Kernel<"cumsum"> {
  let Summary = "Cumulative sum along a dimension";
  let Source = "dgraph.cumsum";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntAttr<"dim">, FlagAttr<"exclusive">, FlagAttr<"reverse">];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"div"> {
  let Summary = "Elementwise quotient (integers truncate toward zero)";
  let Source = "dgraph.div";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"dropout"> {
  let Summary = "Zeroes elements at random and rescales the rest";
  let Source = "dgraph.dropout";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Scalar<"step", I64Element>,
    Optional<Tensor<"offsets", I64Element, 1>>
  ];
  let Outputs = [Tensor<"result", FloatElement>, Tensor<"mask", BoolElement>];
  let Attrs = [
    FloatAttr<"ratio">,
    IntAttr<"seed">,
    OptionalAttr<IntsAttr<"global_shape">>
  ];
}

def : Kernel<"eq"> {
  let Summary = "Elementwise comparison: equals";
  let Source = "dgraph.eq";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"erf"> {
  let Summary = "Elementwise error function";
  let Source = "dgraph.erf";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"exp"> {
  let Summary = "Elementwise exponential";
  let Source = "dgraph.exp";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"floor"> {
  let Summary = "Elementwise rounding down";
  let Source = "dgraph.floor";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"gather"> {
  let Summary = "Gathers slices along an axis by index (embedding lookup)";
  let Source = "dgraph.gather";
  let Inputs = [Tensor<"operand", AnyElement>, Tensor<"indices", IndexElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntAttr<"axis">];
}

def : Kernel<"gather_elements"> {
  let Summary = "Gathers single elements along an axis (take_along_axis)";
  let Source = "dgraph.gather_elements";
  let Inputs = [Tensor<"operand", AnyElement>, Tensor<"indices", IndexElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntAttr<"axis">];
  let Relations = [
    SameShape<["indices", "result"]>,
    SameElementType<["operand", "result"]>
  ];
}

def : Kernel<"gather_nd"> {
  let Summary = "Gathers slices at N-d index tuples (ONNX GatherND)";
  let Source = "dgraph.gather_nd";
  let Inputs = [Tensor<"operand", AnyElement>, Tensor<"indices", IndexElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [Defaulted<IntAttr<"batch_dims">, "0">];
}

def : Kernel<"ge"> {
  let Summary = "Elementwise comparison: is greater than or equal to";
  let Source = "dgraph.ge";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"gelu"> {
  let Summary = "Elementwise Gaussian error linear unit";
  let Source = "dgraph.gelu";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [Defaulted<EnumAttr<"approximate", ["none", "tanh"]>, "none">];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"fused"> {
  let Summary = "Runs a fused region's kernel, generated by the compiler";
  let Source = "dgraph.fused";
  let Inputs = [Variadic<Tensor<"inputs", FloatOrBoolElement>>];
  let Outputs = [Variadic<Tensor<"results", FloatOrBoolElement>>];
  let Attrs = [StringAttr<"symbol">];
}

def : Kernel<"gelu_grad"> {
  let Summary = "Gradient of GELU";
  let Source = "dgraph.gelu_grad";
  let Inputs = [Tensor<"x", FloatElement>, Tensor<"dy", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [Defaulted<EnumAttr<"approximate", ["none", "tanh"]>, "none">];
  let Relations = [SameType<["x", "dy", "result"]>];
}

def : Kernel<"grid_sample"> {
  let Summary = "Samples an image at the positions of a grid";
  let Source = "dgraph.grid_sample";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"grid", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["bilinear", "nearest", "bicubic"]>, "bilinear">,
    Defaulted<EnumAttr<"padding_mode", ["zeros", "border", "reflection"]>, "zeros">,
    Defaulted<BoolAttr<"align_corners">, "0">
  ];
  // Ranks 3 to 5 (1 to 3 spatial dimensions), checked by the kernels.
  let Relations = [SameElementType<["operand", "grid", "result"]>];
}

def : Kernel<"grid_sample_grad"> {
  let Summary = "Gradient of grid_sample for its operand and its grid";
  let Source = "dgraph.grid_sample_grad";
  let Inputs = [
    Tensor<"dy", FloatElement>,
    Tensor<"operand", FloatElement>,
    Tensor<"grid", FloatElement>
  ];
  let Outputs = [
    Tensor<"doperand", FloatElement>,
    Tensor<"dgrid", FloatElement>
  ];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["bilinear", "nearest", "bicubic"]>, "bilinear">,
    Defaulted<EnumAttr<"padding_mode", ["zeros", "border", "reflection"]>, "zeros">,
    Defaulted<BoolAttr<"align_corners">, "0">
  ];
  let Relations = [
    SameElementType<["dy", "operand", "grid", "doperand", "dgrid"]>,
    SameShape<["operand", "doperand"]>,
    SameShape<["grid", "dgrid"]>
  ];
}

def : Kernel<"roi_align"> {
  let Summary = "Pools regions of interest of an image by bilinear samples";
  let Source = "dgraph.roi_align";
  let Inputs = [
    Tensor<"operand", FloatElement, 4>,
    Tensor<"rois", FloatElement, 2>,
    Tensor<"batch_indices", I64Element, 1>
  ];
  let Outputs = [Tensor<"result", FloatElement, 4>];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["avg", "max"]>, "avg">,
    IntAttr<"output_height">,
    IntAttr<"output_width">,
    IntAttr<"sampling_ratio">,
    FloatAttr<"spatial_scale">,
    Defaulted<BoolAttr<"half_pixel">, "1">
  ];
  let Relations = [SameElementType<["operand", "rois", "result"]>];
}

def : Kernel<"roi_align_grad"> {
  let Summary = "Gradient of roi_align for its operand";
  let Source = "dgraph.roi_align_grad";
  let Inputs = [
    Tensor<"dy", FloatElement, 4>,
    Tensor<"operand", FloatElement, 4>,
    Tensor<"rois", FloatElement, 2>,
    Tensor<"batch_indices", I64Element, 1>
  ];
  let Outputs = [Tensor<"doperand", FloatElement, 4>];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["avg", "max"]>, "avg">,
    IntAttr<"output_height">,
    IntAttr<"output_width">,
    IntAttr<"sampling_ratio">,
    FloatAttr<"spatial_scale">,
    Defaulted<BoolAttr<"half_pixel">, "1">
  ];
  let Relations = [
    SameElementType<["dy", "operand", "rois", "doperand"]>,
    SameShape<["operand", "doperand"]>
  ];
}

def : Kernel<"group_norm"> {
  let Summary = "Normalizes groups of channels per sample, with a per-channel affine";
  let Source = "dgraph.group_norm";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"bias", FloatElement>
  ];
  let Outputs = [
    Tensor<"result", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"rstd", FloatElement>
  ];
  let Attrs = [IntAttr<"channels_per_group">, FloatAttr<"epsilon">];
}

def : Kernel<"group_norm_grad"> {
  let Summary = "Gradient of group normalization";
  let Source = "dgraph.group_norm_grad";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"rstd", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [
    Tensor<"dx", FloatElement>,
    Tensor<"dscale", FloatElement>,
    Tensor<"dbias", FloatElement>
  ];
  let Attrs = [IntAttr<"channels_per_group">];
}

def : Kernel<"gt"> {
  let Summary = "Elementwise comparison: is greater than";
  let Source = "dgraph.gt";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"iota"> {
  let Summary = "Indices along one dimension";
  let Source = "dgraph.iota";
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntAttr<"dim">];
}

def : Kernel<"is_inf"> {
  let Summary = "Elementwise test for infinity";
  let Source = "dgraph.is_inf";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Attrs = [
    Defaulted<BoolAttr<"detect_positive">, "1">,
    Defaulted<BoolAttr<"detect_negative">, "1">
  ];
}

def : Kernel<"is_nan"> {
  let Summary = "Elementwise test for NaN";
  let Source = "dgraph.is_nan";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", BoolElement>];
}

def : Kernel<"layer_norm"> {
  let Summary = "Layer normalization over the trailing dimensions";
  let Source = "dgraph.layer_norm";
  let Inputs = [
    Tensor<"operand", FloatElement>,
    Tensor<"scale", FloatElement>,
    Optional<Tensor<"bias", FloatElement>>
  ];
  let Outputs = [
    Tensor<"result", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"rstd", FloatElement>
  ];
  let Attrs = [IntAttr<"axis">, FloatAttr<"epsilon">];
}

def : Kernel<"layer_norm_grad"> {
  let Summary = "Gradient of layer normalization";
  let Source = "dgraph.layer_norm_grad";
  let Inputs = [
    Tensor<"x", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"rstd", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [
    Tensor<"dx", FloatElement>,
    Tensor<"dscale", FloatElement>,
    Tensor<"dbias", FloatElement>
  ];
  let Attrs = [IntAttr<"axis">];
}

def : Kernel<"layer_norm_param_grad"> {
  let Summary = "Scale and bias gradients of layer normalization";
  let Source = "dgraph.layer_norm_param_grad";
  let Inputs = [
    Tensor<"x", FloatElement>,
    Tensor<"mean", FloatElement>,
    Tensor<"rstd", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [
    Tensor<"dscale", FloatElement>,
    Tensor<"dbias", FloatElement>
  ];
  let Attrs = [IntAttr<"axis">];
}

def : Kernel<"le"> {
  let Summary = "Elementwise comparison: is less than or equal to";
  let Source = "dgraph.le";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"log"> {
  let Summary = "Elementwise natural logarithm";
  let Source = "dgraph.log";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"log_softmax"> {
  let Summary = "Log of the softmax along a dimension";
  let Source = "dgraph.log_softmax";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [IntAttr<"dim">];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"log_softmax_grad"> {
  let Summary = "Gradient of log-softmax: `dx = dy - exp(y) * sum(dy)` from its output";
  let Source = "dgraph.log_softmax_grad";
  let Inputs = [Tensor<"y", FloatElement>, Tensor<"dy", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [IntAttr<"dim">];
  let Relations = [SameType<["y", "dy", "result"]>];
}

def : Kernel<"lr_schedule"> {
  let Summary = "The learning rate at a step";
  let Source = "dgraph.lr_schedule";
  let Inputs = [Scalar<"step", I64Element>, Scalar<"total", I64Element>];
  let Outputs = [Scalar<"result", F32Element>];
  let Attrs = [
    FloatAttr<"base_lr">,
    FloatAttr<"min_lr">,
    IntAttr<"warmup">,
    EnumAttr<"kind", ["constant", "linear", "cosine"]>
  ];
}

def : Kernel<"lt"> {
  let Summary = "Elementwise comparison: is less than";
  let Source = "dgraph.lt";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"matmul"> {
  let Summary = "Batched matrix product with broadcast batch dimensions";
  let Source = "dgraph.matmul";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [FlagAttr<"transpose_lhs">, FlagAttr<"transpose_rhs">];
}

def : Kernel<"matmul_bias"> {
  let Summary = "Matrix product plus a bias along its last dimension";
  let Source = "dgraph.matmul_bias";
  let Inputs = [
    Tensor<"lhs", FloatElement>,
    Tensor<"rhs", FloatElement>,
    Tensor<"bias", FloatElement>
  ];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameElementType<["lhs", "rhs", "bias", "result"]>];
  let Attrs = [FlagAttr<"transpose_lhs">, FlagAttr<"transpose_rhs">];
}

def : Kernel<"matmul_bias_grad"> {
  let Summary = "Matrix product and the sums of an operand over its contracted rows";
  let Source = "dgraph.matmul_bias_grad";
  let Inputs = [Tensor<"lhs", FloatElement>, Tensor<"rhs", FloatElement>];
  let Outputs = [
    Tensor<"product", FloatElement>,
    Tensor<"sums", FloatElement>
  ];
  let Relations = [SameElementType<["lhs", "rhs", "product", "sums"]>];
  let Attrs = [FlagAttr<"transpose_lhs">, FlagAttr<"transpose_rhs">,
               IntAttr<"summed">];
}

def : Kernel<"max"> {
  let Summary = "Elementwise maximum (NaN if either is NaN)";
  let Source = "dgraph.max";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"max_pool"> {
  let Summary = "Maximum over sliding windows, with the position of each maximum";
  let Source = "dgraph.max_pool";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [
    Tensor<"result", NumericElement>,
    Tensor<"indices", I64Element>
  ];
  let Attrs = [
    IntsAttr<"kernel">,
    IntsAttr<"strides">,
    IntsAttr<"dilations">,
    IntsAttr<"pad_low">,
    IntsAttr<"pad_high">,
    FlagAttr<"ceil_mode">
  ];
}

def : Kernel<"max_pool_grad"> {
  let Summary = "Gradient of max pooling: output gradients added at the maxima";
  let Source = "dgraph.max_pool_grad";
  let Inputs = [Tensor<"dy", FloatElement>, Tensor<"indices", I64Element>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameShape<["dy", "indices"]>];
}

def : Kernel<"min"> {
  let Summary = "Elementwise minimum (NaN if either is NaN)";
  let Source = "dgraph.min";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"mul"> {
  let Summary = "Elementwise product";
  let Source = "dgraph.mul";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"ne"> {
  let Summary = "Elementwise not-equal (both backends have it; no op emits it)";
  let Inputs = [Tensor<"lhs", AnyElement>, Tensor<"rhs", AnyElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["lhs", "rhs"]>];
}

def : Kernel<"neg"> {
  let Summary = "Elementwise negation";
  let Source = "dgraph.neg";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"not"> {
  let Summary = "Elementwise logical negation";
  let Source = "dgraph.not";
  let Inputs = [Tensor<"operand", BoolElement>];
  let Outputs = [Tensor<"result", BoolElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"or"> {
  let Summary = "Elementwise logical (i1) or bitwise (integers) or";
  let Source = "dgraph.or";
  let Inputs = [Tensor<"lhs", LogicalElement>, Tensor<"rhs", LogicalElement>];
  let Outputs = [Tensor<"result", LogicalElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"pad"> {
  let Summary = "Pads a tensor with a constant or copies of its own elements";
  let Source = "dgraph.pad";
  let Inputs = [Tensor<"operand", AnyElement>, Tensor<"value", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [
    IntsAttr<"low">,
    IntsAttr<"high">,
    Defaulted<EnumAttr<"mode", ["constant", "edge", "reflect", "wrap"]>, "constant">
  ];
}

def : Kernel<"pad_grad"> {
  let Summary = "The adjoint of an edge, reflect or wrap pad";
  let Source = "dgraph.pad_grad";
  let Inputs = [Tensor<"grad", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    IntsAttr<"low">,
    IntsAttr<"high">,
    EnumAttr<"mode", ["constant", "edge", "reflect", "wrap"]>
  ];
}

def : Kernel<"pow"> {
  let Summary = "Elementwise power lhs^rhs";
  let Source = "dgraph.pow";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"random"> {
  let Summary = "A tensor of random numbers, uniform or normal";
  let Source = "dgraph.random";
  let Inputs = [Scalar<"step", I64Element>,
                Optional<Tensor<"offsets", I64Element, 1>>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    EnumAttr<"distribution", ["uniform", "normal"]>,
    FloatAttr<"shift">,
    FloatAttr<"scale">,
    IntAttr<"seed">,
    OptionalAttr<IntsAttr<"global_shape">>
  ];
}

def : Kernel<"reciprocal"> {
  let Summary = "Elementwise reciprocal (1/x)";
  let Source = "dgraph.reciprocal";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"reduce_max"> {
  let Summary = "Reduces dimensions by maximum";
  let Source = "dgraph.reduce_max";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"reduce_min"> {
  let Summary = "Reduces dimensions by minimum";
  let Source = "dgraph.reduce_min";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"reduce_prod"> {
  let Summary = "Reduces dimensions by product";
  let Source = "dgraph.reduce_prod";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"reduce_sum"> {
  let Summary = "Reduces dimensions by summation";
  let Source = "dgraph.reduce_sum";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"relu"> {
  let Summary = "Elementwise rectifier max(x, 0)";
  let Source = "dgraph.relu";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"rem"> {
  let Summary = "Elementwise remainder of truncated division (the sign of the dividend, like C fmod)";
  let Source = "dgraph.rem";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"resize"> {
  let Summary = "Resamples a tensor by nearest, linear or cubic interpolation";
  let Source = "dgraph.resize";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["nearest", "linear", "cubic"]>, "nearest">,
    Defaulted<EnumAttr<"coordinate_transformation_mode", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"]>, "half_pixel">,
    Defaulted<EnumAttr<"nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]>, "round_prefer_floor">,
    Defaulted<FloatAttr<"cubic_coeff_a">, "-0.75">,
    FlagAttr<"exclude_outside">,
    Defaulted<FloatAttr<"extrapolation_value">, "0.0">,
    FlagAttr<"antialias">,
    FloatsAttr<"scales">,
    OptionalAttr<FloatsAttr<"roi">>
  ];
}

def : Kernel<"resize_grad"> {
  let Summary = "The adjoint of resize: accumulates into the source positions";
  let Source = "dgraph.resize_grad";
  let Inputs = [Tensor<"grad", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [
    Defaulted<EnumAttr<"mode", ["nearest", "linear", "cubic"]>, "nearest">,
    Defaulted<EnumAttr<"coordinate_transformation_mode", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"]>, "half_pixel">,
    Defaulted<EnumAttr<"nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]>, "round_prefer_floor">,
    Defaulted<FloatAttr<"cubic_coeff_a">, "-0.75">,
    FlagAttr<"exclude_outside">,
    Defaulted<FloatAttr<"extrapolation_value">, "0.0">,
    FlagAttr<"antialias">,
    FloatsAttr<"scales">,
    OptionalAttr<FloatsAttr<"roi">>
  ];
}

def : Kernel<"reverse"> {
  let Summary = "Reverses the order of elements along dimensions";
  let Source = "dgraph.reverse";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntsAttr<"dims">];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"rms_norm"> {
  let Summary = "Root-mean-square normalization over the trailing dimensions";
  let Source = "dgraph.rms_norm";
  let Inputs = [Tensor<"operand", FloatElement>, Tensor<"scale", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>, Tensor<"rstd", FloatElement>];
  let Attrs = [IntAttr<"axis">, FloatAttr<"epsilon">];
}

def : Kernel<"rms_norm_grad"> {
  let Summary = "Gradient of RMS normalization";
  let Source = "dgraph.rms_norm_grad";
  let Inputs = [
    Tensor<"x", FloatElement>,
    Tensor<"scale", FloatElement>,
    Tensor<"rstd", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [Tensor<"dx", FloatElement>, Tensor<"dscale", FloatElement>];
  let Attrs = [IntAttr<"axis">];
}

def : Kernel<"rms_norm_param_grad"> {
  let Summary = "Scale gradient of RMS normalization";
  let Source = "dgraph.rms_norm_param_grad";
  let Inputs = [
    Tensor<"x", FloatElement>,
    Tensor<"rstd", FloatElement>,
    Tensor<"dy", FloatElement>
  ];
  let Outputs = [Tensor<"dscale", FloatElement>];
  let Attrs = [IntAttr<"axis">];
}

def : Kernel<"round"> {
  let Summary = "Elementwise rounding to nearest, ties to even";
  let Source = "dgraph.round";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"rsqrt"> {
  let Summary = "Elementwise reciprocal square root";
  let Source = "dgraph.rsqrt";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"scatter_add"> {
  let Summary = "Adds slices into a zero tensor by index (the VJP of gather)";
  let Source = "dgraph.scatter_add";
  let Inputs = [
    Tensor<"updates", NumericElement>,
    Tensor<"indices", IndexElement>
  ];
  let Outputs = [Tensor<"result", NumericElement>];
  let Attrs = [IntAttr<"axis">, IntAttr<"dim_size">];
}

def : Kernel<"scatter_elements"> {
  let Summary = "Writes single elements along an axis (ONNX ScatterElements)";
  let Source = "dgraph.scatter_elements";
  let Inputs = [
    Tensor<"operand", AnyElement>,
    Tensor<"indices", IndexElement>,
    Tensor<"updates", AnyElement>
  ];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [
    IntAttr<"axis">,
    Defaulted<EnumAttr<"reduction", ["none", "add", "mul", "max", "min"]>, "none">
  ];
  let Relations = [
    SameType<["operand", "result"]>,
    SameShape<["indices", "updates"]>
  ];
}

def : Kernel<"scatter_nd"> {
  let Summary = "Writes slices at N-d index tuples (ONNX ScatterND)";
  let Source = "dgraph.scatter_nd";
  let Inputs = [
    Tensor<"operand", AnyElement>,
    Tensor<"indices", IndexElement>,
    Tensor<"updates", AnyElement>
  ];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [
    Defaulted<IntAttr<"batch_dims">, "0">,
    Defaulted<EnumAttr<"reduction", ["none", "add", "mul", "max", "min"]>, "none">
  ];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"select"> {
  let Summary = "Elementwise choice between two tensors";
  let Source = "dgraph.select";
  let Inputs = [
    Tensor<"condition", BoolElement>,
    Tensor<"on_true", AnyElement>,
    Tensor<"on_false", AnyElement>
  ];
  let Outputs = [Tensor<"result", AnyElement>];
  let Relations = [SameType<["on_true", "on_false", "result"]>];
}

def : Kernel<"sgd"> {
  let Summary = "One SGD update of a parameter, with momentum";
  let Source = "dgraph.sgd";
  let Inputs = [
    Tensor<"param", FloatElement>,
    Tensor<"grad", FloatElement>,
    Tensor<"buf", FloatElement>,
    Scalar<"lr", F32Element>,
    Scalar<"step", I64Element>,
    Scalar<"grad_scale", F32Element>
  ];
  let Outputs = [
    Tensor<"new_param", FloatElement>,
    Tensor<"new_buf", FloatElement>
  ];
  let Attrs = [
    FloatAttr<"momentum">,
    FloatAttr<"dampening">,
    FloatAttr<"weight_decay">,
    FlagAttr<"nesterov">
  ];
  let Relations = [SameType<["param", "grad", "buf", "new_param", "new_buf"]>];
}

def : Kernel<"shift_left"> {
  let Summary = "Elementwise bitwise left shift";
  let Source = "dgraph.shift_left";
  let Inputs = [Tensor<"lhs", IntElement>, Tensor<"rhs", IntElement>];
  let Outputs = [Tensor<"result", IntElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"shift_right"> {
  let Summary = "Elementwise bitwise right shift (logical for unsigned, arithmetic for signed)";
  let Source = "dgraph.shift_right";
  let Inputs = [Tensor<"lhs", IntElement>, Tensor<"rhs", IntElement>];
  let Outputs = [Tensor<"result", IntElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"sigmoid"> {
  let Summary = "Elementwise logistic sigmoid 1/(1+exp(-x))";
  let Source = "dgraph.sigmoid";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"sign"> {
  let Summary = "Elementwise sign (-1, 0 or 1)";
  let Source = "dgraph.sign";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"silu"> {
  let Summary = "Elementwise SiLU (swish) x*sigmoid(x)";
  let Source = "dgraph.silu";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"silu_grad"> {
  let Summary = "Gradient of SiLU";
  let Source = "dgraph.silu_grad";
  let Inputs = [Tensor<"x", FloatElement>, Tensor<"dy", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["x", "dy", "result"]>];
}

def : Kernel<"sin"> {
  let Summary = "Elementwise sine";
  let Source = "dgraph.sin";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"sinh"> {
  let Summary = "Elementwise hyperbolic sine";
  let Source = "dgraph.sinh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"slice"> {
  let Summary = "Extracts a strided box";
  let Source = "dgraph.slice";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntsAttr<"start">, IntsAttr<"limit">, IntsAttr<"stride">];
}

def : Kernel<"softmax"> {
  let Summary = "Softmax along a dimension";
  let Source = "dgraph.softmax";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [IntAttr<"dim">];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"softmax_grad"> {
  let Summary = "Gradient of softmax: `dx = y * (dy - sum(dy * y))` from its output";
  let Source = "dgraph.softmax_grad";
  let Inputs = [Tensor<"y", FloatElement>, Tensor<"dy", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [IntAttr<"dim">];
  let Relations = [SameType<["y", "dy", "result"]>];
}

def : Kernel<"sqrt"> {
  let Summary = "Elementwise square root";
  let Source = "dgraph.sqrt";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"sub"> {
  let Summary = "Elementwise difference";
  let Source = "dgraph.sub";
  let Inputs = [Tensor<"lhs", NumericElement>, Tensor<"rhs", NumericElement>];
  let Outputs = [Tensor<"result", NumericElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

def : Kernel<"global_sum_squares"> {
  let Summary = "Sum of the squares of every element of its operands (a global norm's square): each operand summed as sum_squares sums it, the sums added in operand order; f32 for f32, bf16 and f16 operands, f64 for f64";
  let Source = "dgraph.global_sum_squares";
  let Inputs = [Variadic<Tensor<"operands", FloatElement>>];
  let Outputs = [Tensor<"result", FloatElement>];
}

def : Kernel<"sum_squares"> {
  let Summary = "Sum of the squared elements over dimensions (a gradient's squared norm), accumulated as reduce_sum accumulates; the result in the operand's type, or f32 for f16 and bf16";
  let Source = "dgraph.sum_squares";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Attrs = [IntsAttr<"dims">];
}

def : Kernel<"tan"> {
  let Summary = "Elementwise tangent";
  let Source = "dgraph.tan";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"tanh"> {
  let Summary = "Elementwise hyperbolic tangent";
  let Source = "dgraph.tanh";
  let Inputs = [Tensor<"operand", FloatElement>];
  let Outputs = [Tensor<"result", FloatElement>];
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"top_k"> {
  let Summary = "The k largest (or smallest) elements along an axis";
  let Source = "dgraph.top_k";
  let Inputs = [Tensor<"operand", NumericElement>];
  let Outputs = [
    Tensor<"values", NumericElement>,
    Tensor<"indices", I64Element>
  ];
  let Attrs = [
    IntAttr<"k">,
    IntAttr<"axis">,
    Defaulted<BoolAttr<"largest">, "1">,
    Defaulted<BoolAttr<"sorted">, "1">
  ];
}

def : Kernel<"transpose"> {
  let Summary = "Permutes the dimensions of a tensor";
  let Source = "dgraph.transpose";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = [IntsAttr<"perm">];
}

def : Kernel<"xor"> {
  let Summary = "Elementwise logical (i1) or bitwise (integers) exclusive or";
  let Source = "dgraph.xor";
  let Inputs = [Tensor<"lhs", LogicalElement>, Tensor<"rhs", LogicalElement>];
  let Outputs = [Tensor<"result", LogicalElement>];
  let Relations = [SameType<["lhs", "rhs", "result"]>];
}

//===----------------------------------------------------------------------===//
// dshard ops: the collectives and transfers on mesh axes
//===----------------------------------------------------------------------===//

def : Kernel<"all_gather"> {
  let Summary = "Concatenates the ranks' tensors along a dimension";
  let Source = "dshard.all_gather";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    IntAttr<"dim">
  ], CollectiveAttrs);
}

def : Kernel<"all_reduce"> {
  let Summary = "Reduces a tensor over a mesh axis; every rank gets the result";
  let Source = "dshard.all_reduce";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    Renamed<Defaulted<EnumAttr<"reduce", ["sum", "max", "min", "prod"]>, "sum">, "kind">
  ], CollectiveAttrs);
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"all_to_all"> {
  let Summary = "Splits one dimension over a mesh axis and gathers another";
  let Source = "dshard.all_to_all";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    IntAttr<"split_dim">,
    IntAttr<"concat_dim">
  ], CollectiveAttrs);
}

def : Kernel<"axis_index"> {
  let Summary = "This rank's coordinate on a mesh axis";
  let Source = "dshard.axis_index";
  let Outputs = [Scalar<"result", AxisIndexElement>];
  let Attrs = !listconcat([Renamed<AxesAttr<"axes">, "axis">], CollectiveAttrs);
}

def : Kernel<"broadcast"> {
  let Summary = "Sends one rank's tensor to every rank of a mesh axis";
  let Source = "dshard.broadcast";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    IntAttr<"root">
  ], CollectiveAttrs);
  let Relations = [SameType<["operand", "result"]>];
}

def : Kernel<"recv"> {
  let Summary = "Receives a tensor from another rank of a mesh axis";
  let Source = "dshard.recv";
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    Renamed<IntAttr<"offset">, "peer">,
    IntAttr<"tag">
  ], CollectiveAttrs);
}

def : Kernel<"reduce_scatter"> {
  let Summary = "Reduces over a mesh axis; rank i keeps block i of a dimension";
  let Source = "dshard.reduce_scatter";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    IntAttr<"dim">,
    Renamed<Defaulted<EnumAttr<"reduce", ["sum", "max", "min", "prod"]>, "sum">, "kind">
  ], CollectiveAttrs);
}

def : Kernel<"send"> {
  let Summary = "Sends a tensor to another rank of a mesh axis";
  let Source = "dshard.send";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    Renamed<IntAttr<"offset">, "peer">,
    IntAttr<"tag">
  ], CollectiveAttrs);
}

def : Kernel<"shard_slice"> {
  let Summary = "Keeps this rank's block of a replicated tensor";
  let Source = "dshard.shard_slice";
  let Inputs = [Tensor<"operand", AnyElement>];
  let Outputs = [Tensor<"result", AnyElement>];
  let Attrs = !listconcat([
    Renamed<AxesAttr<"axes">, "axis">,
    IntAttr<"dim">,
    Defaulted<IntAttr<"groups">, "1">
  ], CollectiveAttrs);
}

def : Kernel<"wait"> {
  let Summary = "Waits for an asynchronous collective";
  let Source = "dshard.wait";
  let Inputs = [Variadic<Tensor<"buffers", AnyElement>>];
  let Attrs = [IntAttr<"handle">, OptionalAttr<StringAttr<"phase">>];
}
