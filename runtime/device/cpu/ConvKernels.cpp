//===- ConvKernels.cpp - convolutions and their gradients on the CPU ------===//
//
// conv, conv_input_grad and conv_filter_grad (GraphConvOps.td). f32 runs on
// oneDNN's convolution primitives (forward, backward data, backward
// weights), created when the kernel is bound with the memory formats oneDNN
// prefers (blocked, for its direct JIT kernels) and reorders between those
// and dtcc's plain NC[D]HW buffers. f64 (and f32 when oneDNN has no
// implementation, or DTCC_CPU_CONV=im2col) is im2col + OpenBLAS GEMM per
// image and group; f16/bf16 are converted to f32 and run on oneDNN, as the
// other kernels compute halves in f32.
//
// Scratch: the blocked copies, oneDNN's scratchpads and im2col's columns
// live in one host buffer all convolution kernels share (they run one at a
// time, on the rank's compute thread), sized when the kernels are bound to
// the largest need, never grown while a step runs. f16/bf16 kernels compute
// in f32 copies of their operands, in the program's compute scratch
// (bindInF32).
//
// Threads: Debian's oneDNN uses OpenMP (libgomp). The OpenMP thread count
// is the other kernels' (cpuThreads: OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS, else every core, as OpenBLAS), fewer for a small
// convolution (convThreads); it is set where a primitive is created, which
// fixes the threads its kernel partitions the work over, and again before
// each call. libgomp's idle threads poll about as long as the kernels'
// own (BlasCore.cpp sets GOMP_SPINCOUNT).
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/ConvGeometry.h"
#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/DnnlContext.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>

extern "C" void omp_set_num_threads(int);

namespace dtcc::runtime {
namespace {

using namespace cpu;

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// The OpenMP threads of a convolution of `g` (each gradient does as much
/// work): the kernels' thread count (ThreadPool.h: OMP_NUM_THREADS, else
/// OPENBLAS_NUM_THREADS, else every core, as OpenBLAS), fewer for small
/// convolutions, one per kParallelMacs multiply-adds: below that, waking
/// another thread costs more than it saves (a small U-Net's 20-40 us
/// convolutions took 1.3-1.6x as long on 2 threads as on 1, on threads
/// that poll). Shape-determined, so a program's results do not change
/// from run to run.
int convThreads(const ConvGeometry &g) {
  double byWork =
      std::max(1.0, std::floor(g.macs() / double(kParallelMacs)));
  return int(std::min<double>(cpuThreads(), byWork));
}

//===----------------------------------------------------------------------===//
// Scratch
//===----------------------------------------------------------------------===//

/// The host buffer the convolution kernels share. Kernels reserve their
/// bytes when bound and find the buffer's address when they run, so a
/// kernel bound before a larger one still sees the final buffer.
class ConvScratch {
public:
  static ConvScratch &get() {
    static ConvScratch scratch;
    return scratch;
  }
  /// False when the memory cannot be had.
  bool reserve(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes <= size_)
      return true;
    size_t rounded = (bytes + 63) / 64 * 64;
    char *p = static_cast<char *>(std::aligned_alloc(64, rounded));
    if (!p)
      return false;
    buffer_.reset(p);
    size_ = rounded;
    return true;
  }
  char *data() const { return buffer_.get(); }

private:
  struct Free {
    void operator()(char *p) const { std::free(p); }
  };
  std::mutex mutex_;
  std::unique_ptr<char, Free> buffer_;
  size_t size_ = 0;
};

/// A kernel's part of the shared scratch: regions from offset 0 on, each
/// 64-byte aligned.
struct ScratchRegion {
  size_t end = 0;
  /// The offset (from the buffer's start) of `bytes` more.
  size_t add(size_t bytes) {
    size_t at = (end + 63) / 64 * 64;
    end = at + bytes;
    return at;
  }
};

//===----------------------------------------------------------------------===//
// im2col + GEMM (f64; f32 without oneDNN)
//===----------------------------------------------------------------------===//

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f, a,
              int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *a,
          int64_t lda, const double *b, int64_t ldb, double beta, double *c,
          int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0, a,
              int(lda), b, int(ldb), beta, c, int(ldc));
}

/// The output positions o in [0, out) whose input position o * stride + off
/// lies in [0, size): [first, last).
inline void validRange(int64_t out, int64_t stride, int64_t off, int64_t size,
                       int64_t &first, int64_t &last) {
  // o * stride + off >= 0  <=>  o >= ceil(-off / stride)
  first = off >= 0 ? 0 : (-off + stride - 1) / stride;
  // o * stride + off <= size - 1  <=>  o <= floor((size - 1 - off) / stride)
  last = size - 1 - off < 0 ? 0 : (size - 1 - off) / stride + 1;
  first = std::min(first, out);
  last = std::clamp(last, first, out);
}

/// Calls fn(row, srcOffset or -1, outIndex) over the column matrix of one
/// image and group: row = (c, kd, kh, kw), column = (od, oh, ow); the
/// innermost run is handled by `run(row, od, oh, first, last, srcBase)`
/// where positions [first, last) of ow read src[srcBase + ow * stride].
template <typename Run>
void forEachColumnRun(const ConvGeometry &g, Run &&run) {
  const auto &in = g.in, &out = g.out, &k = g.kernel;
  int64_t row = 0;
  for (int64_t c = 0; c < g.inPerGroup(); ++c)
    for (int64_t kd = 0; kd < k[0]; ++kd)
      for (int64_t kh = 0; kh < k[1]; ++kh)
        for (int64_t kw = 0; kw < k[2]; ++kw, ++row) {
          const int64_t offD = kd * g.dilation[0] - g.padLow[0];
          const int64_t offH = kh * g.dilation[1] - g.padLow[1];
          const int64_t offW = kw * g.dilation[2] - g.padLow[2];
          int64_t wFirst, wLast;
          validRange(out[2], g.stride[2], offW, in[2], wFirst, wLast);
          for (int64_t od = 0; od < out[0]; ++od) {
            const int64_t id = od * g.stride[0] + offD;
            const bool dIn = id >= 0 && id < in[0];
            for (int64_t oh = 0; oh < out[1]; ++oh) {
              const int64_t ih = oh * g.stride[1] + offH;
              const bool inside = dIn && ih >= 0 && ih < in[1];
              const int64_t base = ((c * in[0] + id) * in[1] + ih) * in[2] + offW;
              run(row, od, oh, inside ? wFirst : 0, inside ? wLast : 0, base);
            }
          }
        }
}

/// col[row, (od, oh, ow)] = x[c, od*s + kd*d - lo, ...] or 0 outside, for one
/// image and group: x is [C/groups, in...], col [C/groups * K, out pixels].
template <typename T>
void im2col(const ConvGeometry &g, const T *x, T *col) {
  const int64_t pixels = g.outPixels(), ow = g.out[2], sw = g.stride[2];
  forEachColumnRun(g, [&](int64_t row, int64_t od, int64_t oh, int64_t first,
                          int64_t last, int64_t base) {
    T *dst = col + row * pixels + (od * g.out[1] + oh) * ow;
    std::fill(dst, dst + first, T(0));
    for (int64_t o = first; o < last; ++o)
      dst[o] = x[base + o * sw];
    std::fill(dst + last, dst + ow, T(0));
  });
}

/// The transpose of im2col: dx[c, ...] += col[row, (od, oh, ow)].
template <typename T>
void col2im(const ConvGeometry &g, const T *col, T *dx) {
  const int64_t pixels = g.outPixels(), ow = g.out[2], sw = g.stride[2];
  forEachColumnRun(g, [&](int64_t row, int64_t od, int64_t oh, int64_t first,
                          int64_t last, int64_t base) {
    const T *src = col + row * pixels + (od * g.out[1] + oh) * ow;
    for (int64_t o = first; o < last; ++o)
      dx[base + o * sw] += src[o];
  });
}

/// One conv kernel as im2col + GEMM over images and groups, its column
/// matrix in the shared scratch. T is float or double.
template <typename T> struct Im2colConv {
  ConvGeometry g;
  ConvKind kind;
  const T *a, *b; ///< the kernel's inputs
  T *out;
  /// A 1x1 kernel with stride 1 and no padding reads the input as it is.
  bool direct;
  size_t colOffset = 0; ///< of the columns in the shared scratch

  Im2colConv(const ConvGeometry &geometry, ConvKind k, const T *a0,
             const T *b0, T *o, ScratchRegion &region)
      : g(geometry), kind(k), a(a0), b(b0), out(o) {
    direct = g.kernelPixels() == 1;
    for (int d = 0; d < ConvGeometry::kMaxSpatial; ++d)
      direct = direct && g.stride[d] == 1 && g.padLow[d] == 0 &&
               g.padHigh[d] == 0;
    if (!direct)
      colOffset = region.add(sizeof(T) * size_t(g.inPerGroup() *
                                                g.kernelPixels() *
                                                g.outPixels()));
  }

  void run() {
    const int64_t cg = g.inPerGroup(), og = g.outPerGroup();
    const int64_t rows = cg * g.kernelPixels(), pixels = g.outPixels();
    const int64_t inImage = g.inChannels * g.inPixels();
    const int64_t outImage = g.outChannels * pixels;
    const int64_t inGroup = cg * g.inPixels(), outGroup = og * pixels;
    const int64_t filterGroup = og * rows;
    T *colData = reinterpret_cast<T *>(ConvScratch::get().data() + colOffset);
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        switch (kind) {
        case ConvKind::kForward: { // y = W x col
          const T *x = a + n * inImage + grp * inGroup;
          const T *cols = x;
          if (!direct) {
            im2col(g, x, colData);
            cols = colData;
          }
          gemm(false, false, og, pixels, rows, b + grp * filterGroup, rows,
               cols, pixels, T(0), out + n * outImage + grp * outGroup,
               pixels);
          break;
        }
        case ConvKind::kInputGrad: { // col = W^T dy, dx = col2im(col)
          const T *dy = a + n * outImage + grp * outGroup;
          T *dx = out + n * inImage + grp * inGroup;
          gemm(true, false, rows, pixels, og, b + grp * filterGroup, rows, dy,
               pixels, T(0), direct ? dx : colData, pixels);
          if (!direct) {
            std::fill(dx, dx + inGroup, T(0));
            col2im(g, colData, dx);
          }
          break;
        }
        case ConvKind::kFilterGrad: { // dW += dy col^T over images
          const T *x = a + n * inImage + grp * inGroup;
          const T *cols = x;
          if (!direct) {
            im2col(g, x, colData);
            cols = colData;
          }
          gemm(false, true, og, rows, pixels, b + n * outImage + grp * outGroup,
               pixels, cols, pixels, n == 0 ? T(0) : T(1),
               out + grp * filterGroup, rows);
          break;
        }
        }
      }
  }
};

//===----------------------------------------------------------------------===//
// oneDNN (f32)
//===----------------------------------------------------------------------===//

/// A plain (row-major) f32 memory descriptor of `dims`, or one whose
/// format oneDNN chooses (`any`).
Status memoryDesc(dnnl_memory_desc_t &md, const std::vector<int64_t> &dims,
                  bool any) {
  static const dnnl_format_tag_t kTags[] = {dnnl_a, dnnl_ab, dnnl_abc,
                                            dnnl_abcd, dnnl_abcde, dnnl_abcdef};
  dnnl_dims_t d = {};
  for (size_t i = 0; i < dims.size(); ++i)
    d[i] = dims[i];
  DTCC_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
      &md, int(dims.size()), d, dnnl_f32,
      any ? dnnl_format_tag_any : kTags[dims.size() - 1]));
  return Status::ok();
}

template <typename T, dnnl_status_t (*Destroy)(T)> struct Owned {
  T value = nullptr;
  Owned() = default;
  Owned(const Owned &) = delete;
  ~Owned() {
    if (value)
      Destroy(value);
  }
};
using OwnedPd = Owned<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy>;
using OwnedAttr = Owned<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy>;

/// One oneDNN convolution bound to fixed buffers: the convolution primitive
/// on the formats oneDNN prefers, reorders from and to dtcc's plain buffers
/// where those differ, and every memory object, made once. The blocked
/// copies and the scratchpads are regions of the shared scratch, attached
/// when the kernel runs.
class DnnlConv {
public:
  ~DnnlConv() {
    for (dnnl_memory_t m : memories_)
      dnnl_memory_destroy(m);
    for (dnnl_primitive_t p : primitives_)
      dnnl_primitive_destroy(p);
  }

  /// `input`, `filter` and `output` are the convolution's (for the
  /// gradients: the buffers of those roles, read or written).
  static StatusOr<std::unique_ptr<DnnlConv>>
  create(const ConvGeometry &g, ConvKind kind, float *input, float *filter,
         float *output, ScratchRegion &region) {
    const DnnlContext &ctx = dnnlContext();
    DTCC_RETURN_IF_ERROR(ctx.status);
    // oneDNN reads the thread count when it creates a primitive and runs
    // that many threads whatever the caller's setting then: created with
    // the process's default (every core), each of several ranks on one
    // host ran every convolution on all cores, their idle threads spinning
    // (a 4-rank ResNet step on 2 cores took 3.2 s instead of 13 ms).
    auto conv = std::unique_ptr<DnnlConv>(new DnnlConv());
    conv->threads_ = convThreads(g);
    omp_set_num_threads(conv->threads_);
    conv->stream_ = ctx.stream;
    std::vector<int64_t> w = g.filterShape();
    if (g.groups > 1) { // [G, O/G, C/G, K..], the same bytes
      w[0] /= g.groups;
      w.insert(w.begin(), g.groups);
    }
    // The user's (plain) formats and the convolution's (any).
    dnnl_memory_desc_t src, weights, dst, srcAny, weightsAny, dstAny;
    DTCC_RETURN_IF_ERROR(memoryDesc(src, g.inputShape(), false));
    DTCC_RETURN_IF_ERROR(memoryDesc(weights, w, false));
    DTCC_RETURN_IF_ERROR(memoryDesc(dst, g.outputShape(), false));
    DTCC_RETURN_IF_ERROR(memoryDesc(srcAny, g.inputShape(), true));
    DTCC_RETURN_IF_ERROR(memoryDesc(weightsAny, w, true));
    DTCC_RETURN_IF_ERROR(memoryDesc(dstAny, g.outputShape(), true));
    dnnl_dims_t strides = {}, dilates = {}, low = {}, high = {};
    const int first = ConvGeometry::kMaxSpatial - g.spatial;
    for (int d = 0; d < g.spatial; ++d) {
      strides[d] = g.stride[first + d];
      dilates[d] = g.dilation[first + d] - 1; // oneDNN counts the gaps
      low[d] = g.padLow[first + d];
      high[d] = g.padHigh[first + d];
    }
    OwnedAttr attr;
    DTCC_DNNL_CHECK(dnnl_primitive_attr_create(&attr.value));
    DTCC_DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(
        attr.value, dnnl_scratchpad_mode_user));
    // The backward primitives take the forward's descriptor as a hint.
    dnnl_convolution_desc_t fwdDesc;
    DTCC_DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(
        &fwdDesc, dnnl_forward_training, dnnl_convolution_direct, &srcAny,
        &weightsAny, nullptr, &dstAny, strides, dilates, low, high));
    OwnedPd fwd, bwd;
    DTCC_DNNL_CHECK(dnnl_primitive_desc_create(&fwd.value, &fwdDesc, attr.value,
                                               ctx.engine, nullptr));
    dnnl_primitive_desc_t pd = fwd.value;
    // (argument, user buffer, user format, whether the primitive writes it)
    struct Arg {
      int arg;
      void *data;
      const dnnl_memory_desc_t *user;
      bool written;
    };
    std::vector<Arg> args;
    if (kind == ConvKind::kForward) {
      args = {{DNNL_ARG_SRC, input, &src, false},
              {DNNL_ARG_WEIGHTS, filter, &weights, false},
              {DNNL_ARG_DST, output, &dst, true}};
    } else {
      dnnl_convolution_desc_t desc;
      if (kind == ConvKind::kInputGrad) {
        DTCC_DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(
            &desc, dnnl_convolution_direct, &srcAny, &weightsAny, &dstAny,
            strides, dilates, low, high));
        args = {{DNNL_ARG_DIFF_DST, output, &dst, false},
                {DNNL_ARG_WEIGHTS, filter, &weights, false},
                {DNNL_ARG_DIFF_SRC, input, &src, true}};
      } else {
        DTCC_DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
            &desc, dnnl_convolution_direct, &srcAny, &weightsAny, nullptr,
            &dstAny, strides, dilates, low, high));
        args = {{DNNL_ARG_SRC, input, &src, false},
                {DNNL_ARG_DIFF_DST, output, &dst, false},
                {DNNL_ARG_DIFF_WEIGHTS, filter, &weights, true}};
      }
      DTCC_DNNL_CHECK(dnnl_primitive_desc_create(&bwd.value, &desc, attr.value,
                                                 ctx.engine, fwd.value));
      pd = bwd.value;
    }
    const char *impl = nullptr;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
            dnnl_success &&
        impl)
      conv->impl_ = impl;

    // Each argument: the user's buffer itself when the primitive takes its
    // plain format, else a copy in the chosen format with a reorder before
    // (inputs) or after (the result).
    Step main, after;
    std::vector<Step> before;
    for (const Arg &a : args) {
      const dnnl_memory_desc_t *chosen =
          dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, a.arg);
      DTCC_ASSIGN_OR_RETURN(dnnl_memory_t user,
                            conv->memory(a.user, a.data, ctx.engine));
      if (dnnl_memory_desc_equal(chosen, a.user)) {
        main.args.push_back({a.arg, user});
        continue;
      }
      DTCC_ASSIGN_OR_RETURN(
          dnnl_memory_t copy,
          conv->scratchMemory(chosen, dnnl_memory_desc_get_size(chosen),
                              ctx.engine, region));
      main.args.push_back({a.arg, copy});
      Step reorder;
      DTCC_RETURN_IF_ERROR(conv->reorder(a.written ? chosen : a.user,
                                         a.written ? a.user : chosen,
                                         a.written ? copy : user,
                                         a.written ? user : copy, attr.value,
                                         ctx.engine, region, reorder));
      (a.written ? after : before.emplace_back()) = std::move(reorder);
    }
    DTCC_RETURN_IF_ERROR(conv->finish(pd, ctx.engine, region, main));
    conv->steps_ = std::move(before);
    conv->steps_.push_back(std::move(main));
    if (after.primitive)
      conv->steps_.push_back(std::move(after));
    return conv;
  }

  Status run() {
    omp_set_num_threads(threads_);
    char *scratch = ConvScratch::get().data();
    for (auto [memory, offset] : scratchMemories_)
      DTCC_DNNL_CHECK(dnnl_memory_set_data_handle(memory, scratch + offset));
    for (const Step &step : steps_)
      DTCC_DNNL_CHECK(dnnl_primitive_execute(step.primitive, stream_,
                                             int(step.args.size()),
                                             step.args.data()));
    DTCC_DNNL_CHECK(dnnl_stream_wait(stream_));
    return Status::ok();
  }

  /// oneDNN's name for the convolution's implementation ("jit:avx512_core",
  /// "gemm:jit", ...).
  const std::string &impl() const { return impl_; }

private:
  struct Step {
    dnnl_primitive_t primitive = nullptr;
    std::vector<dnnl_exec_arg_t> args;
  };

  DnnlConv() = default;

  StatusOr<dnnl_memory_t> memory(const dnnl_memory_desc_t *md, void *data,
                                 dnnl_engine_t engine) {
    dnnl_memory_t m = nullptr;
    DTCC_DNNL_CHECK(dnnl_memory_create(&m, md, engine, data));
    memories_.push_back(m);
    return m;
  }
  /// A memory object over `bytes` of the shared scratch (attached at run).
  StatusOr<dnnl_memory_t> scratchMemory(const dnnl_memory_desc_t *md,
                                        size_t bytes, dnnl_engine_t engine,
                                        ScratchRegion &region) {
    DTCC_ASSIGN_OR_RETURN(dnnl_memory_t m,
                          memory(md, DNNL_MEMORY_NONE, engine));
    scratchMemories_.push_back({m, region.add(bytes)});
    return m;
  }
  /// Creates `pd`'s primitive into `step`, with its scratchpad.
  Status finish(const_dnnl_primitive_desc_t pd, dnnl_engine_t engine,
                ScratchRegion &region, Step &step) {
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0) {
      DTCC_ASSIGN_OR_RETURN(dnnl_memory_t m,
                            scratchMemory(md, bytes, engine, region));
      step.args.push_back({DNNL_ARG_SCRATCHPAD, m});
    }
    DTCC_DNNL_CHECK(dnnl_primitive_create(&step.primitive, pd));
    primitives_.push_back(step.primitive);
    return Status::ok();
  }
  Status reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                 dnnl_memory_t src, dnnl_memory_t dst,
                 const_dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                 ScratchRegion &region, Step &step) {
    OwnedPd pd;
    DTCC_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd.value, from, engine,
                                                       to, engine, attr));
    step.args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    return finish(pd.value, engine, region, step);
  }

  dnnl_stream_t stream_ = nullptr;
  int threads_ = 1; ///< OpenMP threads, fixed when the primitives are made
  std::vector<dnnl_primitive_t> primitives_;
  std::vector<dnnl_memory_t> memories_;
  std::vector<std::pair<dnnl_memory_t, size_t>> scratchMemories_;
  std::vector<Step> steps_;
  std::string impl_;
};

//===----------------------------------------------------------------------===//
// Factories
//===----------------------------------------------------------------------===//

/// The kernel's buffers in the convolution's roles.
struct Roles {
  void *input, *filter, *output;
};
Roles rolesOf(void *in0, void *in1, void *out, ConvKind kind) {
  switch (kind) {
  case ConvKind::kForward:
    return {in0, in1, out};
  case ConvKind::kInputGrad:
    return {out, in1, in0};
  case ConvKind::kFilterGrad:
    return {in0, out, in1};
  }
  return {};
}

/// Whether f32 convolutions skip oneDNN (DTCC_CPU_CONV=im2col), for tests
/// and comparisons.
bool forceIm2col() {
  const char *v = std::getenv("DTCC_CPU_CONV");
  return v && std::string(v) == "im2col";
}

/// f32 on the kernel's operands a, b -> out: oneDNN, or im2col + sgemm
/// where oneDNN has no implementation.
StatusOr<KernelFn> bindFloat(const ConvGeometry &g, ConvKind kind,
                             const KernelContext &ctx, float *a, float *b,
                             float *out, ScratchRegion &region) {
  if (!forceIm2col()) {
    Roles r = rolesOf(a, b, out, kind);
    auto dnnl = DnnlConv::create(g, kind, static_cast<float *>(r.input),
                                 static_cast<float *>(r.filter),
                                 static_cast<float *>(r.output), region);
    if (dnnl.isOk()) {
      std::shared_ptr<DnnlConv> conv = std::move(dnnl).value();
      std::string prefix = errorPrefix(ctx);
      return KernelFn([conv, prefix]() -> Status {
        return conv->run().withContext(prefix + "oneDNN");
      });
    }
    if (dnnl.status().code() != StatusCode::kUnimplemented)
      return dnnl.status().withContext(errorPrefix(ctx) + "binding oneDNN");
  }
  auto conv = std::make_shared<Im2colConv<float>>(g, kind, a, b, out, region);
  return KernelFn([conv]() -> Status {
    conv->run();
    return Status::ok();
  });
}

/// f16/bf16: the f32 kernel on f32 copies of the operands (bindInF32), bound
/// once the copies' addresses are known, with its own part of the shared
/// scratch.
template <typename S>
StatusOr<KernelFn> bindHalf(const ConvGeometry &g, ConvKind kind,
                            const KernelContext &ctx) {
  KernelContext where;
  where.kernel = ctx.kernel;
  where.location = ctx.location;
  return bindInF32<S>(
      ctx, 2,
      [g, kind, where](const std::vector<float *> &f) -> StatusOr<KernelFn> {
        ScratchRegion region;
        DTCC_ASSIGN_OR_RETURN(
            KernelFn fn, bindFloat(g, kind, where, f[0], f[1], f[2], region));
        if (!ConvScratch::get().reserve(region.end))
          return where.error("cannot allocate ", region.end,
                             " bytes of convolution scratch");
        return fn;
      });
}

StatusOr<KernelFn> buildConv(const KernelContext &ctx, ConvKind kind) {
  DTCC_ASSIGN_OR_RETURN(ConvGeometry g, convGeometry(ctx, kind));
  const TensorView &out = ctx.outputs[0];
  const int64_t rows = g.inPerGroup() * g.kernelPixels();
  if (std::max({rows, g.outPixels(), g.outPerGroup()}) > INT_MAX)
    return ctx.error("convolution dimensions exceed the BLAS 32-bit limit");
  // Nothing to sum over (no image, channel or pixel): the result is zero.
  if (ctx.inputs[0].numel() == 0 || ctx.inputs[1].numel() == 0) {
    void *data = out.data;
    const int64_t bytes = out.sizeInBytes();
    return KernelFn([data, bytes]() -> Status {
      if (bytes > 0)
        std::memset(data, 0, size_t(bytes));
      return Status::ok();
    });
  }
  if (out.numel() == 0)
    return KernelFn([]() -> Status { return Status::ok(); });
  ScratchRegion region;
  auto bind = [&]() -> StatusOr<KernelFn> {
    switch (out.dtype) {
    case DType::kF32:
      return bindFloat(g, kind, ctx, static_cast<float *>(ctx.inputs[0].data),
                       static_cast<float *>(ctx.inputs[1].data),
                       static_cast<float *>(out.data), region);
    case DType::kF64: {
      auto conv = std::make_shared<Im2colConv<double>>(
          g, kind, static_cast<const double *>(ctx.inputs[0].data),
          static_cast<const double *>(ctx.inputs[1].data),
          static_cast<double *>(out.data), region);
      return KernelFn([conv]() -> Status {
        conv->run();
        return Status::ok();
      });
    }
    case DType::kF16:
      return bindHalf<Half>(g, kind, ctx);
    case DType::kBF16:
      return bindHalf<BFloat16>(g, kind, ctx);
    default:
      return unsupportedDType(ctx, out.dtype, kSetFloats);
    }
  };
  StatusOr<KernelFn> fn = bind();
  if (fn.isOk() && !ConvScratch::get().reserve(region.end))
    return ctx.error("cannot allocate ", region.end,
                     " bytes of convolution scratch");
  return fn;
}

} // namespace

void registerCpuConvKernels(KernelRegistry &registry) {
  for (const char *name : {"conv", "conv_input_grad", "conv_filter_grad"}) {
    ConvKind kind;
    convKindOf(name, kind);
    registry.add(name, [kind](const KernelContext &ctx) {
      return buildConv(ctx, kind);
    });
  }
}

} // namespace dtcc::runtime
