//===- CpuConvThreadsTest.cpp - convolutions on the threads they are given ===//
//
// oneDNN fixes a primitive's threads when it creates it: the convolution
// kernels must set the OpenMP thread count (OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS, else every core) before they create their primitives, not
// only before they run them, or every rank of a host runs each convolution
// on all cores. Its own executable: the OpenMP thread pool and the thread
// count the kernels read once belong to the process.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/runtime/CpuKernelTestUtils.h"

#include <cstdlib>

extern "C" void omp_set_num_threads(int);

namespace dtcc::runtime::test {
const KernelRegistry &cpuRegistry() { return cpuKernels(); }
} // namespace dtcc::runtime::test

using namespace dtcc::runtime;
using namespace dtcc::runtime::test;

namespace {

TEST(CpuConvThreads, KernelsUseTheThreadsTheEnvironmentGives) {
  // As a rank under mpirun on a 4-core host: OPENBLAS_NUM_THREADS=1, no
  // OMP_NUM_THREADS, and OpenMP's default of one thread per core.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  unsetenv("OMP_NUM_THREADS");
  omp_set_num_threads(4);
  const int before = processThreadCount();
  Attrs attrs;
  attrs.set("strides", std::vector<int64_t>{1, 1});
  attrs.set("dilations", std::vector<int64_t>{1, 1});
  attrs.set("pad_low", std::vector<int64_t>{1, 1});
  attrs.set("pad_high", std::vector<int64_t>{1, 1});
  attrs.set("groups", int64_t(1));
  Tensor x(DType::kF32, {4, 32, 16, 16}), w(DType::kF32, {32, 32, 3, 3});
  Tensor y = Tensor::output(DType::kF32, {4, 32, 16, 16});
  Tensor dx = Tensor::output(DType::kF32, {4, 32, 16, 16});
  Tensor dw = Tensor::output(DType::kF32, {32, 32, 3, 3});
  ASSERT_TRUE(runKernel("conv", {x.view(), w.view()}, {y.view()}, attrs).isOk());
  ASSERT_TRUE(
      runKernel("conv_input_grad", {y.view(), w.view()}, {dx.view()}, attrs).isOk());
  ASSERT_TRUE(
      runKernel("conv_filter_grad", {x.view(), y.view()}, {dw.view()}, attrs).isOk());
  // A team of more than one thread would have left OpenMP's workers.
  EXPECT_EQ(processThreadCount(), before);
}

} // namespace
