//===- KernelBench.cpp - the kernels dtcc calibrate times -----------------===//

#include "tools/dtcc-calibrate/KernelBench.h"

#include "runtime/base/Format.h"
#include "runtime/device/cpu/AttentionPlan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <sstream>
#include <utility>

namespace dtcc::calibrate {

using runtime::Attrs;
using runtime::DType;
using runtime::Status;
using runtime::StatusOr;
using runtime::strCat;
using Fill = OperandSpec::Fill;

KernelBenchSizes KernelBenchSizes::tiny() {
  KernelBenchSizes s;
  s.rows = 4;
  s.cols = 8;
  s.batch = 1;
  s.heads = 2;
  s.seq = 4;
  s.headDim = 4;
  s.tokens = 4;
  s.vocab = 16;
  s.lookups = 8;
  s.embed = 4;
  return s;
}

KernelBenchSizes KernelBenchSizes::gpu() {
  KernelBenchSizes s;
  s.rows = 4096;
  s.cols = 4096;
  s.batch = 64;
  s.heads = 16;
  s.seq = 128;
  s.headDim = 128;
  s.tokens = 4096;
  s.vocab = 4096;
  s.lookups = 16384;
  s.embed = 1024;
  return s;
}

namespace {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

OperandSpec in(DType dtype, Shape shape, Fill fill = Fill::kUniform,
               double value = 0) {
  return OperandSpec{dtype, std::move(shape), fill, value, -1};
}
OperandSpec f32(Shape shape, Fill fill = Fill::kUniform) {
  return in(DType::kF32, std::move(shape), fill);
}
OperandSpec scalar(DType dtype, double value) {
  return in(dtype, {}, Fill::kValue, value);
}
OperandSpec indices(Shape shape, int64_t bound) {
  return in(DType::kI64, std::move(shape), Fill::kIndices, double(bound));
}
OperandSpec out(DType dtype, Shape shape) {
  return OperandSpec{dtype, std::move(shape), Fill::kZero, 0, -1};
}
OperandSpec inPlace(int input, const OperandSpec &of) {
  OperandSpec o = of;
  o.fill = Fill::kZero;
  o.aliasOf = input;
  return o;
}

Attrs attrs(std::initializer_list<std::pair<const char *, Attrs::Value>> list) {
  Attrs a;
  for (const auto &[name, value] : list)
    a.set(name, value);
  return a;
}

KernelCase single(std::string kernel, std::vector<OperandSpec> ins,
                  std::vector<OperandSpec> outs, Attrs a = {}) {
  return KernelCase{
      std::move(kernel),
      {KernelCall{std::move(ins), std::move(outs), std::move(a)}}};
}

std::string typeString(const OperandSpec &o) {
  std::string s;
  for (int64_t d : o.shape)
    s += std::to_string(d) + "x";
  return s + runtime::dtypeName(o.dtype);
}

/// "2 x 512x512xf32, 512xf32": runs of one type counted.
std::string operandList(const std::vector<OperandSpec> &ops) {
  std::string s;
  for (size_t i = 0; i < ops.size();) {
    size_t j = i + 1;
    while (j < ops.size() && typeString(ops[j]) == typeString(ops[i]))
      ++j;
    if (!s.empty())
      s += ", ";
    if (j - i > 1)
      s += strCat(j - i, " x ");
    s += typeString(ops[i]);
    i = j;
  }
  return s.empty() ? "()" : s;
}

std::string attrValue(const Attrs::Value &v) {
  std::ostringstream os;
  if (auto *i = std::get_if<int64_t>(&v))
    os << *i;
  else if (auto *d = std::get_if<double>(&v))
    os << *d;
  else if (auto *s = std::get_if<std::string>(&v))
    os << *s;
  else if (auto *is = std::get_if<std::vector<int64_t>>(&v)) {
    os << "[";
    for (size_t k = 0; k < is->size(); ++k)
      os << (k ? ", " : "") << (*is)[k];
    os << "]";
  }
  return os.str();
}

/// splitmix64: deterministic fills without <random>'s per-element cost.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Stores `v` (a real, or an integer for integer types) as element i.
void store(DType dtype, void *data, int64_t i, double v) {
  switch (dtype) {
  case DType::kF32:
    static_cast<float *>(data)[i] = float(v);
    break;
  case DType::kF64:
    static_cast<double *>(data)[i] = v;
    break;
  case DType::kBF16:
    static_cast<uint16_t *>(data)[i] = runtime::floatToBf16(float(v));
    break;
  case DType::kF16:
    static_cast<uint16_t *>(data)[i] = runtime::floatToHalf(float(v));
    break;
  case DType::kI64:
    static_cast<int64_t *>(data)[i] = int64_t(v);
    break;
  case DType::kI32:
    static_cast<int32_t *>(data)[i] = int32_t(v);
    break;
  case DType::kBool:
    static_cast<uint8_t *>(data)[i] = v != 0;
    break;
  default:
    break;
  }
}

void fillOperand(const OperandSpec &o, void *data, uint64_t seed) {
  const int64_t n = numel(o.shape);
  if (o.fill == Fill::kZero)
    return; // allocated zeroed
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = mix(seed * 0x100000001B3ull + uint64_t(i));
    const double u = double(bits >> 11) * 0x1.0p-53; // [0, 1)
    double v = 0;
    switch (o.fill) {
    case Fill::kZero:
      break;
    case Fill::kUniform:
      v = 2 * u - 1;
      break;
    case Fill::kPositive:
      v = 0.5 + u;
      break;
    case Fill::kIndices:
      v = double(bits % uint64_t(std::max(1.0, o.value)));
      break;
    case Fill::kMask:
      v = bits & 1;
      break;
    case Fill::kValue:
      v = o.value;
      break;
    }
    store(o.dtype, data, i, v);
  }
}

bool allFinite(const runtime::TensorView &v) {
  const int64_t n = v.numel();
  for (int64_t i = 0; i < n; ++i) {
    double x = 0;
    switch (v.dtype) {
    case DType::kF32:
      x = v.as<const float>()[i];
      break;
    case DType::kF64:
      x = v.as<const double>()[i];
      break;
    case DType::kBF16:
      x = runtime::bf16ToFloat(v.as<const uint16_t>()[i]);
      break;
    default:
      return true;
    }
    if (!std::isfinite(x))
      return false;
  }
  return true;
}

} // namespace

std::string KernelCase::workload() const {
  std::string s;
  for (const KernelCall &call : calls) {
    if (!s.empty())
      s += " and ";
    s += operandList(call.inputs) + " -> ";
    bool allInPlace = !call.outputs.empty();
    for (const OperandSpec &o : call.outputs)
      allInPlace &= o.aliasOf >= 0;
    s += allInPlace ? "in place" : operandList(call.outputs);
    if (!call.attrs.all().empty()) {
      s += " {";
      bool first = true;
      for (const auto &[name, value] : call.attrs.all()) {
        s += strCat(first ? "" : ", ", name, " = ", attrValue(value));
        first = false;
      }
      s += "}";
    }
  }
  return s;
}

int64_t KernelCase::elements() const {
  int64_t total = 0;
  for (const KernelCall &call : calls) {
    int64_t largest = 0;
    for (const auto *list : {&call.inputs, &call.outputs})
      for (const OperandSpec &o : *list)
        largest = std::max(largest, numel(o.shape));
    total += largest;
  }
  return total;
}

int64_t KernelCase::bytes() const {
  int64_t total = 0;
  for (const KernelCall &call : calls)
    for (const auto *list : {&call.inputs, &call.outputs})
      for (const OperandSpec &o : *list)
        total += numel(o.shape) * int64_t(runtime::dtypeSize(o.dtype));
  return total;
}

std::vector<KernelCase> kernelBenchCases(const KernelBenchSizes &s) {
  const DType kF32 = DType::kF32, kI64 = DType::kI64, kBool = DType::kBool;
  const Shape mat{s.rows, s.cols}, half{s.rows, s.cols / 2},
      quarter{s.rows, s.cols / 4}, row{s.cols}, perRow{s.rows};
  const Shape scores{s.batch, s.heads, s.seq, s.seq};
  const int64_t kvHeads = s.heads / 2;
  std::vector<KernelCase> cases;
  auto add = [&](KernelCase c) { cases.push_back(std::move(c)); };

  // Elementwise, as the programs' activations, residuals and rotary
  // embeddings (out of place: an in-place loop would drift to denormals).
  for (const char *name : {"neg", "relu", "exp", "sin", "cos", "silu"})
    add(single(name, {f32(mat)}, {out(kF32, mat)}));
  for (const char *name : {"log", "sqrt", "reciprocal"})
    add(single(name, {f32(mat, Fill::kPositive)}, {out(kF32, mat)}));
  add(single("gelu", {f32(mat)}, {out(kF32, mat)},
             attrs({{"approximate", std::string("none")}})));
  for (const char *name : {"add", "sub", "mul", "min"})
    add(single(name, {f32(mat), f32(mat)}, {out(kF32, mat)}));
  add(single("div", {f32(mat), f32(mat, Fill::kPositive)}, {out(kF32, mat)}));
  add(single("pow", {f32(mat, Fill::kPositive), f32(mat)}, {out(kF32, mat)}));
  // Masks: the causal mask compares int64 positions; relu's gradient
  // compares activations.
  for (const char *name : {"eq", "lt", "ge"})
    add(single(name, {indices(mat, s.seq), indices(mat, s.seq)},
               {out(kBool, mat)}));
  add(single("gt", {f32(mat), f32(mat)}, {out(kBool, mat)}));
  add(single("and", {in(kBool, mat, Fill::kMask), in(kBool, mat, Fill::kMask)},
             {out(kBool, mat)}));
  add(single("not", {in(kBool, mat, Fill::kMask)}, {out(kBool, mat)}));
  add(single("select", {in(kBool, mat, Fill::kMask), f32(mat), f32(mat)},
             {out(kF32, mat)}));
  // Mixed precision: weights to bf16 for the step, gradients back to f32.
  add(KernelCase{"cast",
                 {KernelCall{{f32(mat)}, {out(DType::kBF16, mat)}, {}},
                  KernelCall{{in(DType::kBF16, mat)}, {out(kF32, mat)}, {}}}});

  // Data movement.
  add(single("copy", {f32(mat)}, {out(kF32, mat)}));
  add(single("iota", {}, {out(kI64, mat)}, attrs({{"dim", int64_t(0)}})));
  // Grouped-query attention: kv heads repeated for the query heads.
  add(single("broadcast_in_dim", {f32({s.batch, kvHeads, 1, s.seq, s.headDim})},
             {out(kF32, {s.batch, kvHeads, 2, s.seq, s.headDim})},
             attrs({{"dims", std::vector<int64_t>{0, 1, 2, 3, 4}}})));
  // [batch, seq, heads, headDim] -> [batch, heads, seq, headDim].
  add(single("transpose", {f32({s.batch, s.seq, s.heads, s.headDim})},
             {out(kF32, {s.batch, s.heads, s.seq, s.headDim})},
             attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}})));
  // Rotary embeddings: halves sliced off and concatenated back.
  add(single("slice", {f32(mat)}, {out(kF32, half)},
             attrs({{"start", std::vector<int64_t>{0, s.cols / 2}},
                    {"limit", std::vector<int64_t>{s.rows, s.cols}},
                    {"stride", std::vector<int64_t>{1, 1}}})));
  add(single("concat", {f32(half), f32(half)}, {out(kF32, mat)},
             attrs({{"dim", int64_t(1)}})));
  // A slice's gradient: zeros around the slice.
  add(single("pad", {f32(quarter), scalar(kF32, 0)}, {out(kF32, mat)},
             attrs({{"low", std::vector<int64_t>{0, s.cols / 4}},
                    {"high", std::vector<int64_t>{0, s.cols / 2}}})));

  // Embeddings.
  const Shape table{s.vocab, s.embed}, looked{s.lookups, s.embed};
  add(single("gather", {f32(table), indices({s.lookups}, s.vocab)},
             {out(kF32, looked)}, attrs({{"axis", int64_t(0)}})));
  add(single("scatter_add", {f32(looked), indices({s.lookups}, s.vocab)},
             {out(kF32, table)},
             attrs({{"axis", int64_t(0)}, {"dim_size", s.vocab}})));
  // The vocabulary-parallel cross-entropy picks each row's label logit.
  add(single("gather_elements", {f32(mat), indices({s.rows, 1}, s.cols)},
             {out(kF32, {s.rows, 1})}, attrs({{"axis", int64_t(1)}})));

  // Reductions over the last axis.
  for (const char *name : {"reduce_sum", "reduce_max"})
    add(single(name, {f32(mat)}, {out(kF32, perRow)},
               attrs({{"dims", std::vector<int64_t>{1}}})));
  // The clipping norm's squares of a whole gradient (its bf16 copy under
  // mixed precision, dtcc-fold-optimizer-inputs), into one f32.
  add(single("sum_squares", {in(DType::kBF16, mat)}, {out(kF32, {})},
             attrs({{"dims", std::vector<int64_t>{0, 1}}})));

  // Attention softmax over the keys, normalizations over the hidden axis.
  add(single("softmax", {f32(scores)}, {out(kF32, scores)},
             attrs({{"dim", int64_t(3)}})));
  add(single("layer_norm", {f32(mat), f32(row), f32(row)},
             {out(kF32, mat), out(kF32, perRow), out(kF32, perRow)},
             attrs({{"axis", int64_t(1)}, {"epsilon", 1e-5}})));
  add(single("rms_norm", {f32(mat), f32(row)},
             {out(kF32, mat), out(kF32, perRow)},
             attrs({{"axis", int64_t(1)}, {"epsilon", 1e-5}})));
  const Shape logits{s.tokens, s.vocab};
  add(single("cross_entropy", {f32(logits), indices({s.tokens}, s.vocab)},
             {out(kF32, {s.tokens})},
             attrs({{"ignore_index", int64_t(-100)}})));

  // Gradients.
  add(single("gelu_grad", {f32(mat), f32(mat)}, {out(kF32, mat)},
             attrs({{"approximate", std::string("none")}})));
  add(single("silu_grad", {f32(mat), f32(mat)}, {out(kF32, mat)}));
  add(single("softmax_grad", {f32(scores, Fill::kPositive), f32(scores)},
             {out(kF32, scores)}, attrs({{"dim", int64_t(3)}})));
  add(single(
      "layer_norm_grad",
      {f32(mat), f32(row), f32(perRow), f32(perRow, Fill::kPositive), f32(mat)},
      {out(kF32, mat), out(kF32, row), out(kF32, row)},
      attrs({{"axis", int64_t(1)}})));
  add(single("rms_norm_grad",
             {f32(mat), f32(row), f32(perRow, Fill::kPositive), f32(mat)},
             {out(kF32, mat), out(kF32, row)}, attrs({{"axis", int64_t(1)}})));
  // What fused regions leave of the norms' gradients (their dx in regions).
  add(single("layer_norm_param_grad",
             {f32(mat), f32(perRow), f32(perRow, Fill::kPositive), f32(mat)},
             {out(kF32, row), out(kF32, row)}, attrs({{"axis", int64_t(1)}})));
  add(single("rms_norm_param_grad",
             {f32(mat), f32(perRow, Fill::kPositive), f32(mat)},
             {out(kF32, row)}, attrs({{"axis", int64_t(1)}})));
  add(single("cross_entropy_grad",
             {f32(logits), indices({s.tokens}, s.vocab), f32({s.tokens})},
             {out(kF32, logits)}, attrs({{"ignore_index", int64_t(-100)}})));

  // The optimizer step, in place as the programs update their state.
  add(single("lr_schedule", {scalar(kI64, 1), scalar(kI64, 1000)},
             {out(kF32, {})},
             attrs({{"base_lr", 3e-4},
                    {"min_lr", 0.0},
                    {"warmup", int64_t(0)},
                    {"kind", std::string("constant")}})));
  {
    OperandSpec param = f32(mat), v = f32(mat, Fill::kPositive);
    add(single("adamw",
               {param, f32(mat), f32(mat), v, scalar(kF32, 3e-4),
                scalar(kI64, 1), scalar(kF32, 1)},
               {inPlace(0, param), inPlace(2, param), inPlace(3, v)},
               attrs({{"beta1", 0.9},
                      {"beta2", 0.999},
                      {"epsilon", 1e-8},
                      {"weight_decay", 0.01}})));
    add(single(
        "sgd",
        {param, f32(mat), f32(mat), scalar(kF32, 3e-4), scalar(kI64, 2),
         scalar(kF32, 1)},
        {inPlace(0, param), inPlace(2, param)},
        attrs(
            {{"momentum", 0.9}, {"dampening", 0.0}, {"weight_decay", 0.01}})));
  }
  return cases;
}

KernelCase matmulCase(int64_t n, DType dtype) {
  return single("matmul", {in(dtype, {n, n}), in(dtype, {n, n})},
                {out(dtype, {n, n})});
}

std::vector<KernelCase> attentionCases(int64_t heads, int64_t seq,
                                       int64_t headDim, DType dtype) {
  const Shape rows = {heads, seq, headDim}, lse = {heads, seq};
  const Attrs a = attrs({{"scale", 1.0 / std::sqrt(double(headDim))},
                         {"causal", int64_t(1)}});
  return {
      single("attention", {in(dtype, rows), in(dtype, rows), in(dtype, rows)},
             {out(dtype, rows), out(runtime::cpu::logsumexpDType(dtype), lse)},
             a),
      single("attention_grad",
             {in(dtype, rows), in(dtype, rows), in(dtype, rows),
              in(dtype, rows),
              in(runtime::cpu::logsumexpDType(dtype), lse, Fill::kValue,
                 std::log(double(seq))),
              in(dtype, rows)},
             {out(dtype, rows), out(dtype, rows), out(dtype, rows)}, a)};
}

KernelCase launchCase() {
  return single("neg", {f32({1})}, {out(DType::kF32, {1})});
}

//===----------------------------------------------------------------------===//
// Binding and timing
//===----------------------------------------------------------------------===//

BoundKernelCase::~BoundKernelCase() {
  for (Buffer &b : buffers_) {
    if (!b.owned)
      continue;
    if (device_)
      device_->deallocate(b.data);
    else
      std::free(b.data);
  }
}

StatusOr<std::unique_ptr<BoundKernelCase>>
BoundKernelCase::bind(const KernelCase &kase,
                      const runtime::KernelRegistry &registry) {
  return bindWith(kase, registry, nullptr);
}

StatusOr<std::unique_ptr<BoundKernelCase>>
BoundKernelCase::bind(const KernelCase &kase, runtime::Device &device) {
  // A function of its own: a device that fuses runs of instructions (the
  // CUDA backend's adamw) must not join this case to the previous one.
  device.beginFunction();
  return bindWith(kase, device.kernels(), &device);
}

StatusOr<std::unique_ptr<BoundKernelCase>>
BoundKernelCase::bindWith(const KernelCase &kase,
                          const runtime::KernelRegistry &registry,
                          runtime::Device *device) {
  std::unique_ptr<BoundKernelCase> bound(new BoundKernelCase());
  bound->device_ = device;
  const runtime::KernelFactory *factory = registry.find(kase.kernel);
  if (!factory)
    return runtime::notFound(
        "calibrate: no kernel named '", kase.kernel, "' in the ",
        device ? "kernel registry of " + device->name()
               : std::string("CPU kernel registry"));
  uint64_t seed = 1;
  for (const KernelCall &call : kase.calls) {
    runtime::KernelContext ctx;
    ctx.kernel = kase.kernel;
    ctx.location = "dtcc calibrate";
    ctx.attrs = call.attrs;
    ctx.scratch = bound->scratch_.get();
    auto allocate = [&](const OperandSpec &o) -> StatusOr<runtime::TensorView> {
      const int64_t bytes =
          std::max<int64_t>(1, numel(o.shape)) * runtime::dtypeSize(o.dtype);
      const int64_t rounded = (bytes + 63) / 64 * 64;
      if (device) {
        // Filled on the host, then copied: the same values as a host
        // binding's, zeros for outputs.
        DTCC_ASSIGN_OR_RETURN(void *data, device->allocate(rounded));
        bound->buffers_.push_back({data, true});
        std::vector<uint8_t> host(size_t(rounded), 0);
        fillOperand(o, host.data(), seed++);
        DTCC_RETURN_IF_ERROR(
            device->copyHostToDevice(data, host.data(), rounded));
        return runtime::makeView(data, o.dtype, o.shape);
      }
      void *data = std::aligned_alloc(64, size_t(rounded));
      if (!data)
        return runtime::internalError("calibrate: cannot allocate ", bytes,
                                      " bytes");
      std::memset(data, 0, size_t(rounded));
      bound->buffers_.push_back({data, true});
      fillOperand(o, data, seed++);
      return runtime::makeView(data, o.dtype, o.shape);
    };
    for (const OperandSpec &o : call.inputs) {
      DTCC_ASSIGN_OR_RETURN(runtime::TensorView v, allocate(o));
      ctx.inputs.push_back(std::move(v));
    }
    for (const OperandSpec &o : call.outputs) {
      if (o.aliasOf >= 0) {
        if (size_t(o.aliasOf) >= ctx.inputs.size())
          return runtime::invalidArgument("calibrate: ", kase.kernel,
                                          ": output aliases input ", o.aliasOf,
                                          " of ", ctx.inputs.size());
        runtime::TensorView v = ctx.inputs[size_t(o.aliasOf)];
        ctx.outputs.push_back(v);
        continue;
      }
      DTCC_ASSIGN_OR_RETURN(runtime::TensorView v, allocate(o));
      ctx.outputs.push_back(std::move(v));
    }
    StatusOr<runtime::KernelFn> fn = (*factory)(ctx);
    if (!fn.isOk())
      return fn.status().withContext(
          strCat("calibrate: binding ", kase.kernel, " on ", kase.workload()));
    bound->fns_.push_back(std::move(fn.value()));
    for (const runtime::TensorView &v : ctx.outputs)
      bound->outputs_.push_back(v);
  }
  // The scratch every call asked for, as a program's is: once, bound.
  if (device) {
    DTCC_ASSIGN_OR_RETURN(void *scratch,
                          device->reserveScratch(*bound->scratch_));
    if (scratch)
      bound->buffers_.push_back({scratch, true});
  } else {
    DTCC_ASSIGN_OR_RETURN(runtime::ScratchLayout layout,
                          bound->scratch_->layout());
    void *scratch = nullptr;
    if (layout.totalBytes > 0) {
      scratch = std::aligned_alloc(size_t(runtime::kScratchAlignment),
                                   size_t(layout.totalBytes));
      if (!scratch)
        return runtime::internalError("calibrate: cannot allocate ",
                                      layout.totalBytes, " bytes of scratch");
      bound->buffers_.push_back({scratch, true});
    }
    DTCC_RETURN_IF_ERROR(bound->scratch_->bind(scratch));
  }
  return bound;
}

Status BoundKernelCase::run() {
  for (runtime::KernelFn &fn : fns_)
    DTCC_RETURN_IF_ERROR(fn());
  return Status::ok();
}

bool BoundKernelCase::outputsFinite() const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    StatusOr<std::vector<uint8_t>> bytes = outputBytes(i);
    if (!bytes.isOk())
      return false;
    const runtime::TensorView &v = outputs_[i];
    if (!allFinite(runtime::makeView(bytes.value().data(), v.dtype, v.shape)))
      return false;
  }
  return true;
}

StatusOr<std::vector<uint8_t>> BoundKernelCase::outputBytes(size_t i) const {
  if (i >= outputs_.size())
    return runtime::invalidArgument("calibrate: output ", i, " of ",
                                    outputs_.size());
  const runtime::TensorView &v = outputs_[i];
  std::vector<uint8_t> host(size_t(v.sizeInBytes()));
  if (host.empty())
    return host;
  if (device_) {
    DTCC_RETURN_IF_ERROR(device_->synchronize());
    DTCC_RETURN_IF_ERROR(
        device_->copyDeviceToHost(host.data(), v.data, int64_t(host.size())));
  } else {
    std::memcpy(host.data(), v.data, host.size());
  }
  return host;
}

StatusOr<double> timeSustained(const std::function<Status()> &fn,
                               double windowSeconds, int rounds) {
  // About 20 us between clock reads.
  return timeSustained(
      fn, [] { return Status::ok(); }, windowSeconds, 20e-6, rounds);
}

StatusOr<double> timeSustained(const std::function<Status()> &fn,
                               const std::function<Status()> &sync,
                               double windowSeconds, double batchSeconds,
                               int rounds) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  constexpr int64_t kMaxBatch = int64_t(1) << 20;
  DTCC_RETURN_IF_ERROR(fn()); // warm-up: pages, caches, lazy plans
  DTCC_RETURN_IF_ERROR(sync());
  auto t0 = Clock::now();
  DTCC_RETURN_IF_ERROR(fn());
  DTCC_RETURN_IF_ERROR(sync());
  const double once = std::max(1e-9, since(t0));
  int64_t batch =
      std::clamp<int64_t>(int64_t(batchSeconds / once), 1, kMaxBatch);
  // One call's time includes a synchronization; calls issued back to back
  // may take less each, so grow the batch until it lasts batchSeconds.
  for (;;) {
    t0 = Clock::now();
    for (int64_t i = 0; i < batch; ++i)
      DTCC_RETURN_IF_ERROR(fn());
    DTCC_RETURN_IF_ERROR(sync());
    if (since(t0) >= batchSeconds || batch >= kMaxBatch)
      break;
    batch *= 2;
  }
  std::vector<double> perCall;
  for (int round = 0; round < std::max(1, rounds); ++round) {
    int64_t calls = 0;
    t0 = Clock::now();
    double elapsed = 0;
    do {
      for (int64_t i = 0; i < batch; ++i)
        DTCC_RETURN_IF_ERROR(fn());
      DTCC_RETURN_IF_ERROR(sync());
      calls += batch;
      elapsed = since(t0);
    } while (elapsed < windowSeconds);
    perCall.push_back(elapsed / double(calls));
  }
  std::sort(perCall.begin(), perCall.end());
  return perCall[perCall.size() / 2];
}

} // namespace dtcc::calibrate
