//===- CpuElementwiseKernelsTest.cpp - unary/binary/compare/select/cast ---===//
//
// Elementwise CPU kernels against double-precision references, over every
// dtype they accept and contiguous, broadcast, transposed and reversed
// operand layouts; plus in-place runs and the fp16 fast conversions.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cpu/CpuKernelUtils.h"
#include "runtime/device/cpu/VectorMath.h"
#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <limits>

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

//===----------------------------------------------------------------------===//
// fp16 conversions used by the kernels
//===----------------------------------------------------------------------===//

TEST(CpuHalfConversions, LoadHalfMatchesHalfToFloatForEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float a = cpu::loadHalf(uint16_t(bits)), e = halfToFloat(uint16_t(bits));
    if (std::isnan(e))
      EXPECT_TRUE(std::isnan(a)) << bits;
    else
      EXPECT_EQ(cpu::floatBits(a), cpu::floatBits(e)) << bits;
  }
}

TEST(CpuHalfConversions, StoreHalfAndBf16MatchTheReference) {
  std::mt19937 rng(7);
  std::vector<float> values = {
      0.0f,  -0.0f,           1.0f,      65504.0f, 65519.0f,    65520.0f,
      1e-8f, 5.96046448e-08f, 2.98e-08f, 6.1e-5f,  float(kInf), -float(kInf)};
  for (int i = 0; i < 1000000; ++i)
    values.push_back(cpu::bitsFloat(uint32_t(rng())));
  for (float f : values) {
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(cpu::storeHalf(f))));
      EXPECT_TRUE(std::isnan(bf16ToFloat(cpu::storeBf16(f))));
      continue;
    }
    ASSERT_EQ(cpu::storeHalf(f), floatToHalf(f)) << f;
    ASSERT_EQ(cpu::storeBf16(f), floatToBf16(f)) << f;
  }
}

TEST(CpuVectorMath, EveryFunctionAndInstructionSetMatchesLibm) {
  using cpu::MathFn;
  struct Case {
    MathFn fn;
    double (*ref)(double);
    double lo, hi;
  } cases[] = {
      {MathFn::kExp, std::exp, -80, 80},
      {MathFn::kExpm1, std::expm1, -5, 5},
      {MathFn::kLog, std::log, 1e-6, 1e6},
      {MathFn::kLog1p, std::log1p, -0.9, 9},
      {MathFn::kTanh, std::tanh, -9, 9},
      {MathFn::kErf, std::erf, -4, 4},
      {MathFn::kSin, std::sin, -10, 10},
      {MathFn::kCos, std::cos, -10, 10},
      {MathFn::kTan, std::tan, -1.5, 1.5},
      {MathFn::kAsin, std::asin, -1, 1},
      {MathFn::kAcos, std::acos, -1, 1},
      {MathFn::kAtan, std::atan, -50, 50},
      {MathFn::kSinh, std::sinh, -9, 9},
      {MathFn::kCosh, std::cosh, -9, 9},
      {MathFn::kAsinh, std::asinh, -50, 50},
      {MathFn::kAcosh, std::acosh, 1, 50},
      {MathFn::kAtanh, std::atanh, -0.99, 0.99},
  };
  std::mt19937 rng(11);
  int ran = 0;
  for (int isa : {cpu::kMathScalar, cpu::kMathSse, cpu::kMathAvx2})
    for (const Case &c : cases)
      for (int64_t n : {1, 3, 8, 13, 300}) {
        std::vector<float> f(n);
        std::vector<double> d(n), in(n);
        for (int64_t i = 0; i < n; ++i) {
          in[i] = std::uniform_real_distribution<double>(c.lo, c.hi)(rng);
          f[i] = float(in[i]);
          d[i] = in[i];
        }
        if (!cpu::vectorMathWithIsa(isa, c.fn, f.data(), n))
          continue;
        ASSERT_TRUE(cpu::vectorMathWithIsa(isa, c.fn, d.data(), n));
        ++ran;
        for (int64_t i = 0; i < n; ++i) {
          double ef = c.ref(double(float(in[i]))), ed = c.ref(in[i]);
          EXPECT_NEAR(f[i], ef, 1e-6 * std::fabs(ef) + 1e-7)
              << "isa " << isa << " fn " << int(c.fn) << " x " << in[i];
          EXPECT_NEAR(d[i], ed, 1e-14 * std::fabs(ed) + 1e-15)
              << "isa " << isa << " fn " << int(c.fn) << " x " << in[i];
        }
      }
  EXPECT_GE(ran, 17 * 5) << "at least the scalar set ran";
}

/// erf's error in units of the last place of the float nearest erf(x).
double erfUlps(float got, float x) {
  const double want = std::erf(double(x));
  const double ulp = std::ldexp(1.0, std::ilogb(float(want)) - 23);
  return std::fabs(double(got) - want) / std::max(ulp, 0x1p-149);
}

TEST(CpuVectorMath, WideExpAndLogAreTheAvx2Bits) {
  // vectorMath takes libmvec's AVX-512 expf and logf where the CPU has
  // AVX-512 because they compute the AVX2 variants' bits (all 2^32 floats
  // on glibc 2.36): the fused regions' loops, which call either width, and
  // the kernels then agree. A glibc where they differ fails here.
  std::mt19937 rng(9);
  std::vector<float> x;
  for (int i = 0; i < 1 << 20; ++i)
    x.push_back(cpu::bitsFloat(uint32_t(rng())));
  for (int i = 0; i < 1 << 20; ++i)
    x.push_back(std::uniform_real_distribution<float>(-110, 90)(rng));
  for (cpu::MathFn fn : {cpu::MathFn::kExp, cpu::MathFn::kLog}) {
    std::vector<float> wide = x, narrow = x;
    if (!cpu::vectorMathWide(fn, wide.data(), int64_t(wide.size())) ||
        !cpu::vectorMathWithIsa(cpu::kMathAvx2, fn, narrow.data(),
                                int64_t(narrow.size())))
      GTEST_SKIP() << "no AVX-512 or AVX2 libmvec here";
    for (size_t i = 0; i < x.size(); ++i)
      if (!(std::isnan(wide[i]) && std::isnan(narrow[i])))
        ASSERT_EQ(cpu::floatBits(wide[i]), cpu::floatBits(narrow[i]))
            << "fn " << int(fn) << " x " << x[i];
  }
}

TEST(CpuVectorMath, ErfRationalIsWithinSevenUlpOfErf) {
  // Every 61st float from the smallest subnormal up to past the
  // saturation, both signs: 35 million values.
  std::vector<float> xs;
  for (uint32_t bits = 1; bits <= cpu::floatBits(4.5f); bits += 61)
    for (uint32_t sign : {0u, 0x80000000u})
      xs.push_back(cpu::bitsFloat(bits | sign));
  std::vector<float> got = xs;
  cpu::erfRational(got.data(), int64_t(got.size()));
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = erfUlps(got[i], xs[i]);
    if (e > worst)
      worst = e, at = xs[i];
    ASSERT_LE(std::fabs(got[i]), 1.0f) << xs[i];
    ASSERT_EQ(std::signbit(got[i]), std::signbit(xs[i])) << xs[i];
  }
  EXPECT_LE(worst, 7.0) << "at " << at;
  // Away from +-1, where the quotient's roundings dominate, it is closer.
  for (float x : {0.0f, 0.001f, 0.5f, 1.0f, 2.0f})
    EXPECT_LE(erfUlps(cpu::ErfRational::eval(x), x), 3.0) << x;
}

TEST(CpuVectorMath, ErfRationalSpecialValuesAndEveryVersionAgree) {
  float special[] = {float(kInf), -float(kInf), float(kNan), 0.0f,  -0.0f,
                     3.92f,       -3.92f,       100.0f,      -1e30f};
  cpu::erfRational(special, 9);
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], -1.0f);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_EQ(cpu::floatBits(special[3]), cpu::floatBits(0.0f));
  EXPECT_EQ(cpu::floatBits(special[4]), cpu::floatBits(-0.0f));
  for (int i = 5; i < 9; ++i)
    EXPECT_EQ(std::fabs(special[i]), 1.0f) << i;
  // The scalar evaluation (libm's fmaf here, or the instruction) is the
  // reference for the vector clones vectorMath picks, bit for bit, at every
  // length (vector bodies and remainders).
  std::mt19937 rng(5);
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    std::vector<float> x(n);
    for (float &v : x)
      v = std::uniform_real_distribution<float>(-5, 5)(rng);
    std::vector<float> got = x;
    cpu::vectorMath(cpu::MathFn::kErf, got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      volatile float in = x[i];
      ASSERT_EQ(cpu::floatBits(got[i]),
                cpu::floatBits(cpu::ErfRational::eval(in)))
          << "n " << n << " x " << x[i];
    }
  }
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

struct UnaryCase {
  const char *name;
  std::function<double(double)> ref;
  double lo, hi;
  std::string approximate = "";
};

const std::vector<UnaryCase> &floatUnaryCases() {
  static const std::vector<UnaryCase> cases = {
      {"exp", [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](double x) { return std::log(x); }, 0.05, 5},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 9},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.05, 9},
      {"reciprocal", [](double x) { return 1 / x; }, 0.2, 5},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, -8, 8},
      {"erf", [](double x) { return std::erf(x); }, -3, 3},
      {"sin", [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](double x) { return std::cos(x); }, -4, 4},
      {"tan", [](double x) { return std::tan(x); }, -1.3, 1.3},
      {"asin", [](double x) { return std::asin(x); }, -0.95, 0.95},
      {"acos", [](double x) { return std::acos(x); }, -0.95, 0.95},
      {"atan", [](double x) { return std::atan(x); }, -5, 5},
      {"sinh", [](double x) { return std::sinh(x); }, -3, 3},
      {"cosh", [](double x) { return std::cosh(x); }, -3, 3},
      {"asinh", [](double x) { return std::asinh(x); }, -5, 5},
      {"acosh", [](double x) { return std::acosh(x); }, 1.05, 5},
      {"atanh", [](double x) { return std::atanh(x); }, -0.9, 0.9},
      {"floor", [](double x) { return std::floor(x); }, -5, 5},
      {"ceil", [](double x) { return std::ceil(x); }, -5, 5},
      {"round", [](double x) { return std::nearbyint(x); }, -5, 5},
      {"neg", [](double x) { return -x; }, -3, 3},
      {"abs", [](double x) { return std::fabs(x); }, -3, 3},
      {"sign", [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
      {"relu", [](double x) { return x < 0 ? 0 : x; }, -3, 3},
      {"gelu",
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
       -4, 4, "none"},
      {"gelu",
       [](double x) {
         return 0.5 * x *
                (1 +
                 std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       -4, 4, "tanh"},
  };
  return cases;
}

TEST(CpuVectorMath, ExpOfLargeNegativeInputsUnderflowsCorrectly) {
  // Masked attention scores reach exp as -1e9; below -87.3 vectorMath takes
  // its exp(x/2)^2 route, which must give libm's zeros and subnormals.
  std::vector<float> in = {-1e9f, -1e4f, -200.0f, -174.0f, -110.0f, -103.5f,
                           -100.0f, -95.0f, -90.0f, -87.4f, -87.3f, -87.0f,
                           -20.0f, 0.0f, 3.0f};
  for (int rep = 0; rep < 40; ++rep) // a chunk's worth, several times
    in.push_back(-1e9f + rep);
  std::vector<float> out = in;
  cpu::vectorMath(cpu::MathFn::kExp, out.data(), out.size());
  for (size_t i = 0; i < in.size(); ++i) {
    float ref = std::exp(in[i]);
    if (ref == 0.0f) {
      EXPECT_EQ(out[i], 0.0f) << "x " << in[i];
      continue;
    }
    // Subnormal results carry few significant bits: compare in units of the
    // smallest subnormal there, relatively elsewhere.
    float tol = std::max(std::fabs(ref) * 2e-6f, 2 * std::numeric_limits<float>::denorm_min());
    EXPECT_NEAR(out[i], ref, tol) << "x " << in[i];
  }
}

TEST(CpuUnaryKernels, FloatFunctionsMatchReference) {
  std::mt19937 rng(1);
  for (const UnaryCase &c : floatUnaryCases()) {
    for (DType dt : floatDTypes()) {
      for (const auto &shape : elementwiseShapes()) {
        for (Operand &in : operandVariants(rng, dt, shape, c.lo, c.hi)) {
          Attrs attrs;
          if (!c.approximate.empty())
            attrs.set("approximate", c.approximate);
          Tensor out = Tensor::output(dt, shape);
          Status s = runKernel(c.name, {in.view()}, {out.view()}, attrs);
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor expected(dt, shape);
          forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
            expected.set(linearIndex(idx, shape), c.ref(in.at(idx)));
          });
          EXPECT_TRUE(tensorsClose(out, expected))
              << c.name << c.approximate << " " << dtypeName(dt) << " "
              << shapeStr(shape) << " " << in.layout;
        }
      }
    }
  }
}

TEST(CpuUnaryKernels, IntegerNegAbsSignReluMatchReference) {
  std::mt19937 rng(2);
  struct Case {
    const char *name;
    std::function<int64_t(int64_t)> ref;
  } cases[] = {
      {"neg", [](int64_t x) { return -x; }},
      {"abs", [](int64_t x) { return x < 0 ? -x : x; }},
      {"sign", [](int64_t x) { return int64_t((x > 0) - (x < 0)); }},
      {"relu", [](int64_t x) { return x < 0 ? 0 : x; }},
  };
  for (const Case &c : cases)
    for (DType dt : intDTypes())
      for (const auto &shape : elementwiseShapes()) {
        auto [lo, hi] = defaultRange(dt);
        for (Operand &in : operandVariants(rng, dt, shape, lo, hi)) {
          Tensor out = Tensor::output(dt, shape);
          ASSERT_TRUE(runKernel(c.name, {in.view()}, {out.view()}).isOk());
          Tensor expected(dt, shape);
          forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
            expected.setInt(linearIndex(idx, shape), c.ref(in.atInt(idx)));
          });
          EXPECT_TRUE(tensorsClose(out, expected))
              << c.name << " " << dtypeName(dt) << " " << shapeStr(shape) << " "
              << in.layout;
        }
      }
}

TEST(CpuUnaryKernels, IntegerNegAndAbsWrapAtTheMinimum) {
  Tensor in(DType::kI8, {2});
  in.setInt(0, -128);
  in.setInt(1, 5);
  Tensor neg = Tensor::output(DType::kI8, {2});
  Tensor abs = Tensor::output(DType::kI8, {2});
  ASSERT_TRUE(runKernel("neg", {in.view()}, {neg.view()}).isOk());
  ASSERT_TRUE(runKernel("abs", {in.view()}, {abs.view()}).isOk());
  EXPECT_EQ(neg.getInt(0), -128);
  EXPECT_EQ(neg.getInt(1), -5);
  EXPECT_EQ(abs.getInt(0), -128);
  EXPECT_EQ(abs.getInt(1), 5);
}

TEST(CpuUnaryKernels, SpecialFloatValues) {
  for (DType dt : floatDTypes()) {
    Tensor in(dt, {8});
    double values[] = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, kNan, -kInf};
    for (int i = 0; i < 8; ++i)
      in.set(i, values[i]);
    auto run = [&](const char *name) {
      Tensor out = Tensor::output(dt, {8});
      EXPECT_TRUE(runKernel(name, {in.view()}, {out.view()}).isOk());
      return out;
    };
    Tensor round = run("round");
    double rounded[] = {-2, -2, -0.0, 0, 2, 2};
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(round.get(i), rounded[i]) << "round ties to even " << i;
    EXPECT_TRUE(std::isnan(round.get(6)));
    Tensor relu = run("relu");
    EXPECT_TRUE(std::isnan(relu.get(6))) << "relu keeps NaN";
    EXPECT_EQ(relu.get(7), 0);
    EXPECT_TRUE(std::isnan(run("sign").get(6))) << "sign keeps NaN";
    EXPECT_EQ(run("sigmoid").get(7), 0);
    EXPECT_EQ(run("exp").get(7), 0);
  }
}

TEST(CpuUnaryKernels, NotIsNanIsInf) {
  std::mt19937 rng(3);
  for (const auto &shape : elementwiseShapes())
    for (Operand &in : operandVariants(rng, DType::kBool, shape, 0, 1)) {
      Tensor out = Tensor::output(DType::kBool, shape);
      ASSERT_TRUE(runKernel("not", {in.view()}, {out.view()}).isOk());
      Tensor expected(DType::kBool, shape);
      forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
        expected.setInt(linearIndex(idx, shape), !in.atInt(idx));
      });
      EXPECT_TRUE(tensorsClose(out, expected)) << shapeStr(shape);
    }
  double values[] = {1.0, kNan, kInf, -kInf, 0.0, -kNan, 65504.0};
  for (DType dt : floatDTypes()) {
    Tensor in(dt, {7});
    for (int i = 0; i < 7; ++i)
      in.set(i, values[i]);
    Tensor nan = Tensor::output(DType::kBool, {7});
    ASSERT_TRUE(runKernel("is_nan", {in.view()}, {nan.view()}).isOk());
    for (int i = 0; i < 7; ++i)
      EXPECT_EQ(nan.getInt(i), std::isnan(values[i]) ? 1 : 0) << i;
    for (int pos = 0; pos < 2; ++pos)
      for (int neg = 0; neg < 2; ++neg) {
        Attrs attrs;
        if (!pos)
          attrs.set("detect_positive", int64_t(0));
        if (!neg)
          attrs.set("detect_negative", int64_t(0));
        Tensor inf = Tensor::output(DType::kBool, {7});
        ASSERT_TRUE(
            runKernel("is_inf", {in.view()}, {inf.view()}, attrs).isOk());
        for (int i = 0; i < 7; ++i) {
          bool e = (pos && values[i] == kInf) || (neg && values[i] == -kInf);
          EXPECT_EQ(inf.getInt(i), e ? 1 : 0)
              << dtypeName(dt) << " pos " << pos << " neg " << neg << " " << i;
        }
      }
  }
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

int64_t intPowRef(int64_t base, int64_t exp) {
  if (exp < 0)
    return base == 1 ? 1 : base == -1 ? (exp % 2 ? -1 : 1) : 0;
  uint64_t r = 1;
  for (int64_t i = 0; i < exp; ++i)
    r *= uint64_t(base);
  return int64_t(r);
}

struct BinaryCase {
  const char *name;
  std::function<double(double, double)> ref;     // floats
  std::function<int64_t(int64_t, int64_t)> iref; // integers (null: none)
  double loA, hiA, loB, hiB;                     // float ranges
  bool nonZeroB = false;
};

const std::vector<BinaryCase> &binaryCases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](double a, double b) { return a + b; },
       [](int64_t a, int64_t b) { return a + b; }, -3, 3, -3, 3},
      {"sub", [](double a, double b) { return a - b; },
       [](int64_t a, int64_t b) { return a - b; }, -3, 3, -3, 3},
      {"mul", [](double a, double b) { return a * b; },
       [](int64_t a, int64_t b) { return a * b; }, -3, 3, -3, 3},
      {"div", [](double a, double b) { return a / b; },
       [](int64_t a, int64_t b) { return a / b; }, -3, 3, 0.5, 3, true},
      {"rem", [](double a, double b) { return std::fmod(a, b); },
       [](int64_t a, int64_t b) { return a % b; }, -5, 5, -2, 2, true},
      {"pow", [](double a, double b) { return std::pow(a, b); },
       [](int64_t a, int64_t b) { return intPowRef(a, b); }, 0.1, 3, -2, 2},
      {"max", [](double a, double b) { return std::max(a, b); },
       [](int64_t a, int64_t b) { return std::max(a, b); }, -3, 3, -3, 3},
      {"min", [](double a, double b) { return std::min(a, b); },
       [](int64_t a, int64_t b) { return std::min(a, b); }, -3, 3, -3, 3},
  };
  return cases;
}

/// Integer operand ranges of a binary case.
void intRanges(const BinaryCase &c, DType dt, double &loA, double &hiA,
               double &loB, double &hiB) {
  auto [lo, hi] = defaultRange(dt);
  loA = lo, hiA = hi, loB = lo, hiB = hi;
  if (std::string(c.name) == "pow") {
    loA = isUnsignedDType(dt) ? 0 : -4, hiA = 4;
    loB = 0, hiB = 6;
  }
}

void replaceZeros(Operand &op) {
  for (int64_t i = 0; i < op.base.numel(); ++i)
    if (op.base.get(i) == 0)
      op.base.set(i, 1);
}

TEST(CpuBinaryKernels, ArithmeticMatchesReference) {
  std::mt19937 rng(4);
  for (const BinaryCase &c : binaryCases()) {
    for (DType dt : numericDTypes()) {
      const bool isInt = isIntDType(dt);
      double loA = c.loA, hiA = c.hiA, loB = c.loB, hiB = c.hiB;
      if (isInt)
        intRanges(c, dt, loA, hiA, loB, hiB);
      for (const auto &shape : elementwiseShapes()) {
        auto as = operandVariants(rng, dt, shape, loA, hiA);
        auto bs = operandVariants(rng, dt, shape, loB, hiB);
        for (Operand &a : as)
          for (Operand &b : bs) {
            if (c.nonZeroB)
              replaceZeros(b);
            Tensor out = Tensor::output(dt, shape);
            Status s = runKernel(c.name, {a.view(), b.view()}, {out.view()});
            ASSERT_TRUE(s.isOk()) << s.toString();
            Tensor expected(dt, shape);
            forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
              int64_t i = linearIndex(idx, shape);
              if (isInt)
                expected.setInt(i, c.iref(a.atInt(idx), b.atInt(idx)));
              else
                expected.set(i, c.ref(a.at(idx), b.at(idx)));
            });
            EXPECT_TRUE(tensorsClose(out, expected))
                << c.name << " " << dtypeName(dt) << " " << shapeStr(shape)
                << " " << a.layout << " x " << b.layout;
          }
      }
    }
  }
}

TEST(CpuBinaryKernels, IntegerEdgeCases) {
  auto run2 = [](const char *name, DType dt, std::vector<int64_t> a,
                 std::vector<int64_t> b) {
    int64_t n = int64_t(a.size());
    Tensor ta(dt, {n}), tb(dt, {n}), out = Tensor::output(dt, {n});
    for (int64_t i = 0; i < n; ++i) {
      ta.setInt(i, a[i]);
      tb.setInt(i, b[i]);
    }
    Status s = runKernel(name, {ta.view(), tb.view()}, {out.view()});
    EXPECT_TRUE(s.isOk()) << s.toString();
    std::vector<int64_t> r;
    for (int64_t i = 0; i < n; ++i)
      r.push_back(out.getInt(i));
    return r;
  };
  using V = std::vector<int64_t>;
  // Truncation toward zero, remainder with the dividend's sign, INT_MIN/-1.
  EXPECT_EQ(
      run2("div", DType::kI32, {7, -7, 7, -7, INT32_MIN}, {2, 2, -2, -2, -1}),
      (V{3, -3, -3, 3, INT32_MIN}));
  EXPECT_EQ(
      run2("rem", DType::kI32, {7, -7, 7, -7, INT32_MIN}, {2, 2, -2, -2, -1}),
      (V{1, -1, 1, -1, 0}));
  EXPECT_EQ(run2("div", DType::kI64, {INT64_MIN}, {-1}), (V{INT64_MIN}));
  // Negative exponents.
  EXPECT_EQ(run2("pow", DType::kI32, {1, -1, -1, 2, -2, 0, 3},
                 {-3, -3, -2, -1, -2, 0, 4}),
            (V{1, -1, 1, 0, 0, 1, 81}));
  EXPECT_EQ(run2("pow", DType::kI8, {3}, {5}), (V{int8_t(243)}));
  // Shifts: out-of-range counts shift everything out.
  EXPECT_EQ(run2("shift_left", DType::kI8, {1, 1, 1, -1}, {7, 8, -1, 3}),
            (V{-128, 0, 0, -8}));
  EXPECT_EQ(run2("shift_right", DType::kI8, {-128, -5, 5, -5}, {7, 9, 9, 1}),
            (V{-1, -1, 0, -3}));
  EXPECT_EQ(run2("shift_right", DType::kU8, {128, 255}, {7, 8}), (V{1, 0}));
  // Wrapping arithmetic.
  EXPECT_EQ(run2("add", DType::kU8, {250}, {10}), (V{4}));
  EXPECT_EQ(run2("mul", DType::kI32, {65536}, {65536}), (V{0}));
  EXPECT_EQ(run2("mul", DType::kU16, {65535}, {65535}), (V{1}));
}

TEST(CpuBinaryKernels, MaxMinPropagateNaN) {
  for (DType dt : floatDTypes()) {
    Tensor a(dt, {4}), b(dt, {4});
    double av[] = {kNan, 1, kNan, 2}, bv[] = {1, kNan, kNan, -3};
    for (int i = 0; i < 4; ++i) {
      a.set(i, av[i]);
      b.set(i, bv[i]);
    }
    for (const char *name : {"max", "min"}) {
      Tensor out = Tensor::output(dt, {4});
      ASSERT_TRUE(runKernel(name, {a.view(), b.view()}, {out.view()}).isOk());
      for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(std::isnan(out.get(i))) << name << " " << i;
      EXPECT_EQ(out.get(3), std::string(name) == "max" ? 2 : -3);
    }
  }
}

TEST(CpuBinaryKernels, LogicalAndShiftsMatchReference) {
  std::mt19937 rng(5);
  struct Case {
    const char *name;
    std::function<int64_t(int64_t, int64_t, int bits, bool isUnsigned)> ref;
    bool bools;
  } cases[] = {
      {"and", [](int64_t a, int64_t b, int, bool) { return a & b; }, true},
      {"or", [](int64_t a, int64_t b, int, bool) { return a | b; }, true},
      {"xor", [](int64_t a, int64_t b, int, bool) { return a ^ b; }, true},
      {"shift_left",
       [](int64_t a, int64_t b, int, bool) {
         return int64_t(uint64_t(a) << b);
       },
       false},
      {"shift_right",
       [](int64_t a, int64_t b, int, bool isUnsigned) {
         return isUnsigned ? int64_t(uint64_t(a) >> b) : a >> b;
       },
       false},
  };
  for (const Case &c : cases) {
    std::vector<DType> dtypes = intDTypes();
    if (c.bools)
      dtypes.push_back(DType::kBool);
    for (DType dt : dtypes) {
      const int bits = int(dtypeSize(dt) * 8);
      const bool isShift = !c.bools;
      double lo = dt == DType::kBool ? 0 : isUnsignedDType(dt) ? 0 : -120;
      double hi = dt == DType::kBool ? 1 : 120;
      for (const auto &shape : elementwiseShapes()) {
        auto as = operandVariants(rng, dt, shape, lo, hi);
        auto bs = operandVariants(rng, dt, shape, isShift ? 0 : lo,
                                  isShift ? bits - 1 : hi);
        for (Operand &a : as)
          for (Operand &b : bs) {
            Tensor out = Tensor::output(dt, shape);
            ASSERT_TRUE(
                runKernel(c.name, {a.view(), b.view()}, {out.view()}).isOk());
            Tensor expected(dt, shape);
            forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
              expected.setInt(
                  linearIndex(idx, shape),
                  c.ref(a.atInt(idx), b.atInt(idx), bits, isUnsignedDType(dt)));
            });
            EXPECT_TRUE(tensorsClose(out, expected))
                << c.name << " " << dtypeName(dt) << " " << shapeStr(shape)
                << " " << a.layout << " x " << b.layout;
          }
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Compare and select
//===----------------------------------------------------------------------===//

TEST(CpuCompareKernels, MatchReferenceOnEveryDType) {
  std::mt19937 rng(6);
  struct Case {
    const char *name;
    std::function<bool(double, double)> ref;
  } cases[] = {
      {"eq", [](double a, double b) { return a == b; }},
      {"ne", [](double a, double b) { return a != b; }},
      {"lt", [](double a, double b) { return a < b; }},
      {"le", [](double a, double b) { return a <= b; }},
      {"gt", [](double a, double b) { return a > b; }},
      {"ge", [](double a, double b) { return a >= b; }},
  };
  for (const Case &c : cases)
    for (DType dt : allDTypes()) {
      // Small integers so that ties are frequent.
      double lo = isUnsignedDType(dt) || dt == DType::kBool ? 0 : -3;
      double hi = dt == DType::kBool ? 1 : 3;
      for (const auto &shape : elementwiseShapes()) {
        auto as = operandVariants(rng, dt, shape, lo, hi, true);
        auto bs = operandVariants(rng, dt, shape, lo, hi, true);
        for (Operand &a : as)
          for (Operand &b : bs) {
            Tensor out = Tensor::output(DType::kBool, shape);
            ASSERT_TRUE(
                runKernel(c.name, {a.view(), b.view()}, {out.view()}).isOk());
            Tensor expected(DType::kBool, shape);
            forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
              expected.setInt(linearIndex(idx, shape),
                              c.ref(a.at(idx), b.at(idx)));
            });
            EXPECT_TRUE(tensorsClose(out, expected))
                << c.name << " " << dtypeName(dt) << " " << shapeStr(shape)
                << " " << a.layout << " x " << b.layout;
          }
      }
    }
}

TEST(CpuCompareKernels, NaNComparesFalse) {
  for (DType dt : floatDTypes()) {
    Tensor a(dt, {2}), b(dt, {2});
    a.set(0, kNan);
    b.set(0, 1);
    a.set(1, kNan);
    b.set(1, kNan);
    for (const char *name : {"eq", "lt", "le", "gt", "ge"}) {
      Tensor out = Tensor::output(DType::kBool, {2});
      ASSERT_TRUE(runKernel(name, {a.view(), b.view()}, {out.view()}).isOk());
      EXPECT_EQ(out.getInt(0), 0) << name;
      EXPECT_EQ(out.getInt(1), 0) << name;
    }
  }
}

TEST(CpuSelectKernel, MatchesReferenceOnEveryDType) {
  std::mt19937 rng(8);
  for (DType dt : allDTypes()) {
    auto [lo, hi] = defaultRange(dt);
    if (dt == DType::kBool)
      lo = 0, hi = 1;
    for (const auto &shape : elementwiseShapes()) {
      auto cs = operandVariants(rng, DType::kBool, shape, 0, 1);
      auto ts = operandVariants(rng, dt, shape, lo, hi);
      Operand f = contiguousOperand(randomTensor(rng, dt, shape, lo, hi));
      for (Operand &c : cs)
        for (Operand &t : ts) {
          Tensor out = Tensor::output(dt, shape);
          ASSERT_TRUE(
              runKernel("select", {c.view(), t.view(), f.view()}, {out.view()})
                  .isOk());
          Tensor expected(dt, shape);
          forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
            int64_t i = linearIndex(idx, shape);
            const Operand &src = c.atInt(idx) ? t : f;
            if (isFloatDType(dt))
              expected.set(i, src.at(idx));
            else
              expected.setInt(i, src.atInt(idx));
          });
          EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
              << dtypeName(dt) << " " << shapeStr(shape) << " " << c.layout
              << " x " << t.layout;
        }
    }
  }
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

/// The reference cast: floats to integers truncate and saturate (NaN -> 0),
/// integers wrap, anything to bool is != 0.
void castRef(const Operand &in, const std::vector<int64_t> &idx, Tensor &out,
             int64_t i) {
  DType from = in.base.dtype, to = out.dtype;
  if (to == DType::kBool) {
    out.setInt(i, in.at(idx) != 0);
  } else if (isIntDType(to) && isFloatDType(from)) {
    double v = std::trunc(in.at(idx));
    double lo, hi;
    switch (to) {
    case DType::kI8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case DType::kI16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case DType::kI32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    case DType::kU8:
      lo = 0, hi = UINT8_MAX;
      break;
    case DType::kU16:
      lo = 0, hi = UINT16_MAX;
      break;
    case DType::kU32:
      lo = 0, hi = UINT32_MAX;
      break;
    case DType::kU64:
      lo = 0, hi = 1e19;
      break;
    default:
      lo = -9e18, hi = 9e18;
      break;
    }
    out.set(i, std::isnan(v) ? 0 : std::min(hi, std::max(lo, v)));
  } else if (isIntDType(to)) {
    out.setInt(i, in.atInt(idx));
  } else {
    out.set(i, in.at(idx));
  }
}

TEST(CpuCastKernel, EveryPairOfDTypes) {
  std::mt19937 rng(9);
  for (DType from : allDTypes()) {
    double lo = -300, hi = 300;
    if (from == DType::kBool)
      lo = 0, hi = 1;
    else if (from == DType::kI8)
      lo = -128, hi = 127;
    else if (from == DType::kU8)
      lo = 0, hi = 255;
    else if (isUnsignedDType(from))
      lo = 0, hi = 2000;
    else if (isIntDType(from))
      lo = -1000, hi = 1000;
    for (DType to : allDTypes())
      for (const auto &shape : elementwiseShapes())
        for (Operand &in : operandVariants(rng, from, shape, lo, hi)) {
          Tensor out = Tensor::output(to, shape);
          Status s = runKernel("cast", {in.view()}, {out.view()});
          ASSERT_TRUE(s.isOk()) << s.toString();
          Tensor expected(to, shape);
          forEachIndex(shape, [&](const std::vector<int64_t> &idx) {
            castRef(in, idx, expected, linearIndex(idx, shape));
          });
          EXPECT_TRUE(tensorsClose(out, expected, 0, 0))
              << dtypeName(from) << " -> " << dtypeName(to) << " "
              << shapeStr(shape) << " " << in.layout;
        }
  }
}

TEST(CpuCastKernel, SpecialValues) {
  Tensor in(DType::kF32, {6});
  double values[] = {kNan, kInf, -kInf, 3e9, -3e9, -0.75};
  for (int i = 0; i < 6; ++i)
    in.set(i, values[i]);
  Tensor i32 = Tensor::output(DType::kI32, {6});
  ASSERT_TRUE(runKernel("cast", {in.view()}, {i32.view()}).isOk());
  int64_t expected[] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(i32.getInt(i), expected[i]) << i;
  Tensor u8 = Tensor::output(DType::kU8, {6});
  ASSERT_TRUE(runKernel("cast", {in.view()}, {u8.view()}).isOk());
  int64_t expectedU8[] = {0, 255, 0, 255, 0, 0};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(u8.getInt(i), expectedU8[i]) << i;
  Tensor b = Tensor::output(DType::kBool, {6});
  ASSERT_TRUE(runKernel("cast", {in.view()}, {b.view()}).isOk());
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(b.getInt(i), 1) << i; // NaN is nonzero
  // f32 -> f16 / bf16 round to nearest even.
  Tensor t(DType::kF32, {2});
  t.set(0, 1.0 + 1.0 / 2048);
  t.set(1, 1.0 + 3.0 / 2048);
  Tensor h = Tensor::output(DType::kF16, {2});
  ASSERT_TRUE(runKernel("cast", {t.view()}, {h.view()}).isOk());
  EXPECT_EQ(h.get(0), 1.0);
  EXPECT_EQ(h.get(1), 1.0 + 2.0 / 1024);
  t.set(0, 1.0 + 1.0 / 256);
  t.set(1, 1.0 + 3.0 / 256);
  Tensor bf = Tensor::output(DType::kBF16, {2});
  ASSERT_TRUE(runKernel("cast", {t.view()}, {bf.view()}).isOk());
  EXPECT_EQ(bf.get(0), 1.0);
  EXPECT_EQ(bf.get(1), 1.0 + 2.0 / 128);
}

//===----------------------------------------------------------------------===//
// In place and errors
//===----------------------------------------------------------------------===//

TEST(CpuElementwiseKernels, RunInPlace) {
  std::mt19937 rng(10);
  for (DType dt : {DType::kF32, DType::kF16, DType::kI32}) {
    std::vector<int64_t> shape = {5, 37};
    Tensor a = randomTensor(rng, dt, shape, -3, 3);
    Tensor b = randomTensor(rng, dt, {1, 37}, -3, 3);
    Tensor expected(dt, shape);
    for (int64_t i = 0; i < a.numel(); ++i)
      expected.set(i, a.get(i) + b.get(i % 37));
    TensorView bv = b.view();
    bv.shape = shape;
    bv.strides = {0, 1};
    ASSERT_TRUE(runKernel("add", {a.view(), bv}, {a.view()}).isOk());
    EXPECT_TRUE(tensorsClose(a, expected)) << dtypeName(dt);
    // In place on the second operand, with a broadcast first operand.
    Tensor c = randomTensor(rng, dt, shape, -3, 3);
    for (int64_t i = 0; i < c.numel(); ++i)
      expected.set(i, b.get(i % 37) - c.get(i));
    ASSERT_TRUE(runKernel("sub", {bv, c.view()}, {c.view()}).isOk());
    EXPECT_TRUE(tensorsClose(c, expected)) << dtypeName(dt);
  }
  Tensor x = randomTensor(rng, DType::kF32, {100}, -3, 3);
  Tensor expected(DType::kF32, {100});
  for (int64_t i = 0; i < 100; ++i)
    expected.set(i, std::exp(x.get(i)));
  ASSERT_TRUE(runKernel("exp", {x.view()}, {x.view()}).isOk());
  EXPECT_TRUE(tensorsClose(x, expected));
  // A cast between dtypes of one size.
  Tensor u(DType::kI32, {3});
  for (int i = 0; i < 3; ++i)
    u.setInt(i, i - 1);
  TensorView fv = u.view();
  fv.dtype = DType::kF32;
  ASSERT_TRUE(runKernel("cast", {u.view()}, {fv}).isOk());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(u.raw<float>(i), float(i - 1));
}

TEST(CpuElementwiseKernels, ReportErrors) {
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {3, 2}), c(DType::kF64, {2, 3});
  Tensor out(DType::kF32, {2, 3});
  Status s = runKernel("add", {a.view()}, {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 2 inputs"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("node_add"), std::string::npos) << s.message();
  s = runKernel("add", {a.view(), b.view()}, {out.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor<3x2xf32>"), std::string::npos) << s.message();
  s = runKernel("mul", {a.view(), c.view()}, {out.view()});
  EXPECT_NE(s.message().find("f64"), std::string::npos) << s.message();
  Tensor i(DType::kI32, {2, 3}), io(DType::kI32, {2, 3});
  s = runKernel("exp", {i.view()}, {io.view()});
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
  s = runKernel("shift_left", {a.view(), a.view()}, {out.view()});
  EXPECT_FALSE(s.isOk());
  s = runKernel("not", {a.view()}, {out.view()});
  EXPECT_FALSE(s.isOk());
  Attrs attrs;
  attrs.set("approximate", std::string("fast"));
  s = runKernel("gelu", {a.view()}, {out.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fast"), std::string::npos) << s.message();
  TensorView strided = out.view();
  strided.strides = {1, 2};
  s = runKernel("neg", {a.view()}, {strided});
  EXPECT_NE(s.message().find("contiguous"), std::string::npos) << s.message();
}

TEST(CpuElementwiseKernels, IntegerDivisionByZeroIsAnError) {
  for (DType dt : intDTypes())
    for (const char *name : {"div", "rem"}) {
      Tensor a(dt, {4}), b(dt, {4}), out = Tensor::output(dt, {4});
      for (int i = 0; i < 4; ++i) {
        a.setInt(i, 7);
        b.setInt(i, i == 2 ? 0 : 2);
      }
      Status s = runKernel(name, {a.view(), b.view()}, {out.view()});
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
      EXPECT_NE(s.message().find("division by zero"), std::string::npos);
      EXPECT_NE(s.message().find(std::string("node_") + name),
                std::string::npos)
          << s.message();
    }
  // Floats divide by zero to infinity.
  Tensor a(DType::kF32, {1}), b(DType::kF32, {1}), out(DType::kF32, {1});
  a.set(0, 1);
  ASSERT_TRUE(runKernel("div", {a.view(), b.view()}, {out.view()}).isOk());
  EXPECT_EQ(out.get(0), kInf);
}

} // namespace
