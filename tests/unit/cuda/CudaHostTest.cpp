//===- CudaHostTest.cpp - host-side logic of the CUDA backend -------------===//
//
// Runs without a GPU: every entry of the cuBLASLt and NCCL tables, the
// launch configurations, arena carving, the AdamW chunk plan and which
// consecutive adamw instructions share a launch; the direction of
// point-to-point traffic; which GPU a rank drives; the alignment cuBLASLt
// is told; the NCCL watchdog's bookkeeping; the strided kernels' divisions
// by invariant divisors.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/nccl/NcclComm.h"
#include "runtime/comm/nccl/WatchList.h"
#include "runtime/device/cuda/CudaLaunch.h"
#include "runtime/device/cuda/CudaTables.h"
#include "runtime/device/cuda/DeviceChoice.h"
#include "runtime/device/cuda/LaunchConfig.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace dtcc::runtime::cuda {
namespace {

TEST(NcclP2P, SendAndMatchingRecvShareTheirDirection) {
  // Each direction has a communicator and a stream of its own: a send and
  // its receive must pick the same one, and traffic between two ranks goes
  // one way on each.
  for (int rank = 0; rank < 4; ++rank)
    for (int peer = 0; peer < 4; ++peer) {
      if (rank == peer)
        continue;
      EXPECT_EQ(NcclMesh::goesUp(true, rank, peer),
                NcclMesh::goesUp(false, peer, rank))
          << rank << " -> " << peer;
      EXPECT_NE(NcclMesh::goesUp(true, rank, peer),
                NcclMesh::goesUp(true, peer, rank))
          << rank << " <-> " << peer;
      EXPECT_EQ(NcclMesh::goesUp(true, rank, peer), peer > rank);
    }
}

TEST(CudaTables, MatmulTypesEveryEntry) {
  struct Row {
    DType dtype;
    cudaDataType_t data;
    cublasComputeType_t compute;
    cudaDataType_t scale;
  };
  for (const Row &r : {Row{DType::kF32, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                       Row{DType::kF16, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                       Row{DType::kBF16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                       Row{DType::kF64, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F}}) {
    auto t = matmulTypes(r.dtype);
    ASSERT_TRUE(t.isOk()) << dtypeName(r.dtype);
    EXPECT_EQ(t->dataType, r.data) << dtypeName(r.dtype);
    EXPECT_EQ(t->computeType, r.compute) << dtypeName(r.dtype);
    EXPECT_EQ(t->scaleType, r.scale) << dtypeName(r.dtype);
  }
  auto tf32 = matmulTypes(DType::kF32, /*allowTf32=*/true);
  ASSERT_TRUE(tf32.isOk());
  EXPECT_EQ(tf32->computeType, CUBLAS_COMPUTE_32F_FAST_TF32);
  // bf16 keeps fp32 accumulation whatever the TF32 switch says.
  EXPECT_EQ(matmulTypes(DType::kBF16, true)->computeType, CUBLAS_COMPUTE_32F);
  for (DType d : {DType::kI8, DType::kI32, DType::kI64, DType::kBool,
                  DType::kU8}) {
    auto t = matmulTypes(d);
    ASSERT_FALSE(t.isOk());
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(t.status().message().find(dtypeName(d)), std::string::npos);
  }
}

TEST(CudaTables, CudaDataTypeEveryEntry) {
  const std::pair<DType, cudaDataType_t> rows[] = {
      {DType::kF32, CUDA_R_32F}, {DType::kF16, CUDA_R_16F},
      {DType::kBF16, CUDA_R_16BF}, {DType::kF64, CUDA_R_64F},
      {DType::kI8, CUDA_R_8I},   {DType::kU8, CUDA_R_8U},
      {DType::kI32, CUDA_R_32I}, {DType::kU32, CUDA_R_32U},
      {DType::kI64, CUDA_R_64I}, {DType::kU64, CUDA_R_64U}};
  for (auto [d, t] : rows) {
    auto got = cudaDataType(d);
    ASSERT_TRUE(got.isOk()) << dtypeName(d);
    EXPECT_EQ(got.value(), t) << dtypeName(d);
  }
  for (DType d : {DType::kBool, DType::kI16, DType::kU16, DType::kInvalid})
    EXPECT_FALSE(cudaDataType(d).isOk()) << dtypeName(d);
}

TEST(CudaTables, NcclReductionEveryEntry) {
  const std::pair<DType, ncclDataType_t> types[] = {
      {DType::kI8, ncclInt8},       {DType::kU8, ncclUint8},
      {DType::kI32, ncclInt32},     {DType::kU32, ncclUint32},
      {DType::kI64, ncclInt64},     {DType::kU64, ncclUint64},
      {DType::kF16, ncclFloat16},   {DType::kF32, ncclFloat32},
      {DType::kF64, ncclFloat64},   {DType::kBF16, ncclBfloat16}};
  const std::pair<ReduceKind, ncclRedOp_t> ops[] = {
      {ReduceKind::kSum, ncclSum},
      {ReduceKind::kMax, ncclMax},
      {ReduceKind::kMin, ncclMin},
      {ReduceKind::kProd, ncclProd}};
  for (auto [d, t] : types)
    for (auto [k, op] : ops) {
      auto r = ncclReduction(d, k);
      ASSERT_TRUE(r.isOk()) << dtypeName(d) << " " << reduceKindName(k);
      EXPECT_EQ(r->dataType, t) << dtypeName(d);
      EXPECT_EQ(r->op, op) << dtypeName(d) << " " << reduceKindName(k);
    }
  // bool: or for sum/max, and for min/prod, on bytes.
  const std::pair<ReduceKind, ncclRedOp_t> boolOps[] = {
      {ReduceKind::kSum, ncclMax},
      {ReduceKind::kMax, ncclMax},
      {ReduceKind::kMin, ncclMin},
      {ReduceKind::kProd, ncclMin}};
  for (auto [k, op] : boolOps) {
    auto r = ncclReduction(DType::kBool, k);
    ASSERT_TRUE(r.isOk());
    EXPECT_EQ(r->dataType, ncclUint8);
    EXPECT_EQ(r->op, op) << reduceKindName(k);
  }
  for (DType d : {DType::kI16, DType::kU16}) {
    auto r = ncclReduction(d, ReduceKind::kSum);
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  }
}

TEST(CudaTables, NcclMoveTypes) {
  int64_t scale = 0;
  EXPECT_EQ(ncclMoveType(DType::kBF16, &scale), ncclBfloat16);
  EXPECT_EQ(scale, 1);
  EXPECT_EQ(ncclMoveType(DType::kF32, &scale), ncclFloat32);
  EXPECT_EQ(scale, 1);
  EXPECT_EQ(ncclMoveType(DType::kI16, &scale), ncclUint8);
  EXPECT_EQ(scale, 2);
  EXPECT_EQ(ncclMoveType(DType::kU16, &scale), ncclUint8);
  EXPECT_EQ(scale, 2);
  EXPECT_STREQ(ncclDataTypeName(ncclBfloat16), "ncclBfloat16");
}

TEST(LaunchConfig, Elementwise) {
  DeviceLimits h100; // 132 SMs
  EXPECT_EQ(elementwiseLaunch(0, h100).blocks, 0);
  LaunchConfig one = elementwiseLaunch(1, h100);
  EXPECT_EQ(one.blocks, 1);
  EXPECT_EQ(one.threadsX, 256);
  EXPECT_EQ(one.threadsY, 1);
  EXPECT_EQ(elementwiseLaunch(256, h100).blocks, 1);
  EXPECT_EQ(elementwiseLaunch(257, h100).blocks, 2);
  // Capped at 32 blocks per SM; the grid-stride loop covers the rest.
  EXPECT_EQ(elementwiseLaunch(int64_t(1) << 34, h100).blocks, 132 * 32);
  DeviceLimits a100{108, 1024, 2147483647};
  EXPECT_EQ(elementwiseLaunch(int64_t(1) << 30, a100).blocks, 108 * 32);
}

TEST(LaunchConfig, Rows) {
  DeviceLimits l;
  // Short rows: a warp per row, 4 rows per block.
  LaunchConfig a = rowLaunch(1000, 768, l);
  EXPECT_EQ(a.threadsX, 32);
  EXPECT_EQ(a.threadsY, 4);
  EXPECT_EQ(a.blocks, 250);
  EXPECT_EQ(rowLaunch(1001, 1024, l).blocks, 251);
  // Long rows: a block per row, about 4 elements per thread.
  LaunchConfig b = rowLaunch(8, 50257, l);
  EXPECT_EQ(b.threadsX, 1024);
  EXPECT_EQ(b.threadsY, 1);
  EXPECT_EQ(b.blocks, 8);
  LaunchConfig c = rowLaunch(8, 2048, l);
  EXPECT_EQ(c.threadsX, 512);
  EXPECT_EQ(c.threadsY, 1);
  LaunchConfig d = rowLaunch(8, 1025, l);
  EXPECT_EQ(d.threadsX, 512);
  EXPECT_EQ(rowLaunch(0, 10, l).blocks, 0);
  // Every configuration is whole warps within the block limit.
  for (int64_t cols : {1, 31, 32, 100, 1024, 1025, 4096, 65536, 1 << 20}) {
    LaunchConfig r = rowLaunch(3, cols, l);
    EXPECT_EQ(r.threadsX % 32, 0) << cols;
    EXPECT_LE(r.threads(), 1024) << cols;
    EXPECT_GE(r.threads(), 128) << cols;
  }
}

TEST(LaunchConfig, Columns) {
  DeviceLimits l;
  LaunchConfig c = columnLaunch(8192, 1024, l);
  EXPECT_EQ(c.threadsX, 32);
  EXPECT_EQ(c.threadsY, 8);
  EXPECT_EQ(c.blocks, 32);
  EXPECT_EQ(columnLaunch(10, 33, l).blocks, 2);
  EXPECT_EQ(columnLaunch(0, 33, l).blocks, 0);
}

TEST(LaunchConfig, PackRows) {
  DeviceLimits h100; // 132 SMs
  // 8192 rows of 128 packs: a block of 128 threads per row, capped.
  LaunchConfig a = packRowLaunch(8192, 128, h100);
  EXPECT_EQ(a.threadsX, 128);
  EXPECT_EQ(a.threadsY, 1);
  EXPECT_EQ(a.blocks, 132 * 32);
  EXPECT_EQ(packRowLaunch(7, 33, h100).threadsX, 64);
  EXPECT_EQ(packRowLaunch(7, 33, h100).blocks, 7);
  EXPECT_EQ(packRowLaunch(7, 5000, h100).threadsX, 256);
  EXPECT_EQ(packRowLaunch(0, 40, h100).blocks, 0);
}

/// Checks fastDivide against `/` for divisor `d` on the dividends near
/// multiples of it, the limit and `randoms` random ones.
void checkDivisor(uint32_t d, std::mt19937 &rng, int randoms) {
  const FastDivisor f = makeFastDivisor(d);
  std::vector<uint32_t> dividends{0, 1, kFastDivisionLimit - 1,
                                  kFastDivisionLimit - 2};
  for (uint64_t k : {uint64_t(1), uint64_t(2), uint64_t(3),
                     uint64_t(kFastDivisionLimit - 1) / d})
    for (int delta : {-1, 0, 1}) {
      const int64_t n = int64_t(k * d) + delta;
      if (n >= 0 && n < int64_t(kFastDivisionLimit))
        dividends.push_back(uint32_t(n));
    }
  std::uniform_int_distribution<uint32_t> any(0, kFastDivisionLimit - 1);
  for (int i = 0; i < randoms; ++i)
    dividends.push_back(any(rng));
  for (uint32_t n : dividends)
    ASSERT_EQ(fastDivide(n, f), n / d) << n << " / " << d;
}

TEST(FastDivision, EqualsIntegerDivisionBelowTheLimit) {
  std::mt19937 rng(5);
  for (uint32_t d = 1; d <= 4096; ++d)
    checkDivisor(d, rng, 64);
  for (int l = 12; l <= 31; ++l)
    for (int64_t delta : {-1, 0, 1}) {
      const int64_t d = (int64_t(1) << l) + delta;
      if (d >= 1 && d <= int64_t(kFastDivisionLimit))
        checkDivisor(uint32_t(d), rng, 256);
    }
  std::uniform_int_distribution<uint32_t> anyDivisor(1, kFastDivisionLimit);
  for (int i = 0; i < 20000; ++i)
    checkDivisor(anyDivisor(rng), rng, 16);
}

TEST(FastDivision, LayoutsBelowTheLimitTakeIt) {
  Layout l;
  l.rank = 3;
  l.shape[0] = 5;
  l.shape[1] = 7;
  l.shape[2] = 1;
  l.numel = 35;
  prepareLayout(l);
  EXPECT_TRUE(l.fastDivision);
  EXPECT_EQ(fastDivide(34, l.divisors[1]), 34u / 7);
  EXPECT_EQ(fastDivide(34, l.divisors[2]), 34u);
  Layout linear = l;
  linear.linear = true;
  prepareLayout(linear);
  EXPECT_FALSE(linear.fastDivision) << "a linear layout divides nothing";
  Layout big = l;
  big.shape[0] = int64_t(1) << 30;
  big.numel = big.shape[0] * 7;
  prepareLayout(big);
  EXPECT_FALSE(big.fastDivision) << "2^31 elements or more divide in 64 bits";
}

/// The elementwise kernels' 16-byte paths (ElementwiseKernels.cu) are
/// taken exactly where each operand's V consecutive elements are one
/// aligned access or one broadcast element.
TEST(VectorPlan, AlignedUnitStrideRunsAndBroadcasts) {
  const auto at = [](uintptr_t address) {
    return reinterpret_cast<const void *>(address);
  };
  Layout linear;
  linear.linear = true;
  linear.numel = 1003;
  const void *aligned[] = {at(0x1000), at(0x2000), at(0x3000)};
  EXPECT_EQ(vectorPlan(linear, 2, aligned, 3).width, 8);  // bf16: 8 a thread
  EXPECT_EQ(vectorPlan(linear, 4, aligned, 3).width, 4);
  EXPECT_EQ(vectorPlan(linear, 1, aligned, 2).width, 16);
  EXPECT_EQ(vectorPlan(linear, 16, aligned, 2).width, 1) << "no 2 elements fit";
  const void *offByOne[] = {at(0x1000), at(0x2002), at(0x3000)};
  EXPECT_EQ(vectorPlan(linear, 2, offByOne, 3).width, 1);
  Layout small = linear;
  small.numel = 7;
  EXPECT_EQ(vectorPlan(small, 2, aligned, 3).width, 1) << "no whole vector";

  // [rows, 64] + a bias [64] (outer stride 0) + a per-row value (inner
  // stride 0), as the CPU's buildLayout leaves them.
  Layout l;
  l.rank = 2;
  l.operands = 3;
  l.shape[0] = 40;
  l.shape[1] = 64;
  l.numel = 40 * 64;
  l.strides[0][0] = 64, l.strides[1][0] = 1;  // output
  l.strides[0][1] = 0, l.strides[1][1] = 1;   // bias
  l.strides[0][2] = 1, l.strides[1][2] = 0;   // per row
  VectorPlan plan = vectorPlan(l, 2, aligned, 3);
  EXPECT_EQ(plan.width, 8);
  EXPECT_FALSE(plan.broadcast[0]);
  EXPECT_FALSE(plan.broadcast[1]);
  EXPECT_TRUE(plan.broadcast[2]);
  // The output never broadcasts, and a broadcast operand needs no
  // alignment of its own.
  Layout out = l;
  out.strides[1][0] = 0;
  EXPECT_EQ(vectorPlan(out, 2, aligned, 3).width, 1);
  const void *oddRow[] = {at(0x1000), at(0x2000), at(0x3002)};
  EXPECT_EQ(vectorPlan(l, 2, oddRow, 3).width, 8);
  // An inner dimension that is no whole number of vectors, rows 62
  // elements apart (no whole number either), an inner stride of 2: scalar.
  Layout ragged = l;
  ragged.shape[1] = 60;
  ragged.numel = 40 * 60;
  EXPECT_EQ(vectorPlan(ragged, 2, aligned, 3).width, 1);
  Layout rowStride = l;
  rowStride.strides[0][1] = 62;
  EXPECT_EQ(vectorPlan(rowStride, 2, aligned, 3).width, 1);
  Layout strided = l;
  strided.strides[1][1] = 2;
  EXPECT_EQ(vectorPlan(strided, 2, aligned, 3).width, 1);
  // A transpose [2, 24, 4, 64] -> [2, 4, 24, 64]: rows of 64 move whole.
  Layout t;
  t.rank = 4;
  t.operands = 2;
  const int64_t shape[] = {2, 4, 24, 64};
  const int64_t outStrides[] = {4 * 24 * 64, 24 * 64, 64, 1};
  const int64_t inStrides[] = {24 * 4 * 64, 64, 4 * 64, 1};
  t.numel = 2 * 4 * 24 * 64;
  for (int d = 0; d < 4; ++d) {
    t.shape[d] = shape[d];
    t.strides[d][0] = outStrides[d];
    t.strides[d][1] = inStrides[d];
  }
  EXPECT_EQ(vectorPlan(t, 4, aligned, 2).width, 4);
}

TEST(LaunchConfig, NextPowerOfTwo) {
  EXPECT_EQ(nextPowerOfTwo(1), 1);
  EXPECT_EQ(nextPowerOfTwo(2), 2);
  EXPECT_EQ(nextPowerOfTwo(3), 4);
  EXPECT_EQ(nextPowerOfTwo(1025), 2048);
}

TEST(ArenaCarving, OffsetsAreAlignedAndDisjoint) {
  ArenaLayout l = carveArenas({1000, 0, 300});
  ASSERT_EQ(l.offsets.size(), 3u);
  EXPECT_EQ(l.offsets[0], 0);
  EXPECT_EQ(l.offsets[1], 1024); // 1000 rounded up to 256
  EXPECT_EQ(l.offsets[2], 1024); // the empty arena takes no space
  EXPECT_EQ(l.totalBytes, 1536);
  for (int64_t off : l.offsets)
    EXPECT_EQ(off % kArenaAlignment, 0);

  ArenaLayout exact = carveArenas({256, 512, 256});
  EXPECT_EQ(exact.offsets, (std::vector<int64_t>{0, 256, 768}));
  EXPECT_EQ(exact.totalBytes, 1024);

  ArenaLayout empty = carveArenas({0, 0, 0});
  EXPECT_EQ(empty.totalBytes, 256); // cudaMalloc of at least one unit

  ArenaLayout custom = carveArenas({1, 1}, 64);
  EXPECT_EQ(custom.offsets, (std::vector<int64_t>{0, 64}));
  EXPECT_EQ(custom.totalBytes, 128);

  // Large arenas (a 1.3B-parameter model's state) stay exact in int64.
  const int64_t big = int64_t(21) * 1000 * 1000 * 1000 + 3;
  ArenaLayout large = carveArenas({big, 17});
  EXPECT_EQ(large.offsets[1], (big + 255) / 256 * 256);
  EXPECT_GE(large.totalBytes, large.offsets[1] + 17);
}

TEST(AdamwChunks, PrefixSums) {
  AdamwTensor t[3] = {};
  t[0].n = kAdamwChunk;     // 1 chunk
  t[1].n = kAdamwChunk + 1; // 2 chunks
  t[2].n = 0;               // none
  EXPECT_EQ(planAdamwChunks(t, 3), 3);
  EXPECT_EQ(t[0].firstChunk, 0);
  EXPECT_EQ(t[1].firstChunk, 1);
  EXPECT_EQ(t[2].firstChunk, 3);
}

/// Members laid out in a fake address space: member i's tensors at
/// 0x100000 * (i + 1), the scalars shared at 0x10.
struct FakeAdamw {
  static AdamwMember member(int i, int64_t n = 1000) {
    auto at = [&](int k) {
      return reinterpret_cast<float *>(uintptr_t(0x100000) * (i + 1) +
                                       uintptr_t(k) * 0x10000);
    };
    AdamwMember m;
    m.tensor = {at(0), at(1), at(2), at(3), at(0), at(2), at(3), nullptr, n, 0};
    m.gradType = DType::kBF16;
    m.beta1 = 0.9;
    m.beta2 = 0.999;
    m.eps = 1e-8;
    m.weightDecay = 0.01;
    m.lr = reinterpret_cast<void *>(0x10);
    m.step = reinterpret_cast<void *>(0x18);
    m.gradScale = reinterpret_cast<void *>(0x20);
    return m;
  }
};

TEST(AdamwGroups, CompatibleInPlaceUpdatesShareOneLaunch) {
  // Each member updates param, m and v in place: fine within a member.
  std::vector<AdamwMember> ms;
  for (int i = 0; i < 5; ++i)
    ms.push_back(FakeAdamw::member(i, 1000 + i));
  EXPECT_EQ(groupAdamw(ms), std::vector<int>({5}));
  EXPECT_TRUE(canJoinAdamwGroup({}, ms[0]));
  EXPECT_EQ(groupAdamw({}), std::vector<int>());
}

TEST(AdamwGroups, DifferentLaunchParametersSplit) {
  using Edit = void (*)(AdamwMember &);
  const Edit edits[] = {
      [](AdamwMember &m) { m.gradType = DType::kF32; },
      [](AdamwMember &m) { m.beta1 = 0.8; },
      [](AdamwMember &m) { m.beta2 = 0.99; },
      [](AdamwMember &m) { m.eps = 1e-6; },
      [](AdamwMember &m) { m.weightDecay = 0; },
      [](AdamwMember &m) { m.lr = reinterpret_cast<void *>(0x40); },
      [](AdamwMember &m) { m.step = reinterpret_cast<void *>(0x48); },
      [](AdamwMember &m) { m.gradScale = reinterpret_cast<void *>(0x50); },
      [](AdamwMember &m) {
        m.roundedType = DType::kBF16;
        m.tensor.rounded = reinterpret_cast<void *>(0x7000000);
      },
  };
  for (size_t e = 0; e < std::size(edits); ++e) {
    std::vector<AdamwMember> ms = {FakeAdamw::member(0), FakeAdamw::member(1),
                                   FakeAdamw::member(2), FakeAdamw::member(3)};
    edits[e](ms[2]);
    EXPECT_FALSE(canJoinAdamwGroup({ms[0], ms[1]}, ms[2])) << "edit " << e;
    // A member that differs starts a group; the next, like the first, can
    // not join it.
    EXPECT_EQ(groupAdamw(ms), std::vector<int>({2, 1, 1})) << "edit " << e;
  }
}

TEST(AdamwGroups, MemoryOneWritesAndAnotherTouchesSplits) {
  const AdamwMember a = FakeAdamw::member(0);
  // Reads what a writes (its new m).
  AdamwMember readsA = FakeAdamw::member(1);
  readsA.tensor.grad = a.tensor.newM;
  EXPECT_FALSE(canJoinAdamwGroup({a}, readsA));
  // Writes what a reads: the last 4 bytes of its bf16 gradient.
  AdamwMember writesA = FakeAdamw::member(1);
  writesA.tensor.newV = reinterpret_cast<float *>(
      reinterpret_cast<uintptr_t>(a.tensor.grad) + 2 * a.tensor.n - 4);
  EXPECT_FALSE(canJoinAdamwGroup({a}, writesA));
  // Writes what a writes.
  AdamwMember both = FakeAdamw::member(1);
  both.tensor.newParam = a.tensor.newParam;
  EXPECT_FALSE(canJoinAdamwGroup({a}, both));
  // Writes its rounded copy over what a reads (a's m).
  AdamwMember rounds = FakeAdamw::member(1);
  rounds.roundedType = DType::kBF16;
  rounds.tensor.rounded = const_cast<float *>(a.tensor.m);
  EXPECT_FALSE(canJoinAdamwGroup({a}, rounds));
  // Writes a shared scalar.
  AdamwMember lr = FakeAdamw::member(1);
  lr.tensor.newM = static_cast<float *>(const_cast<void *>(a.lr));
  EXPECT_FALSE(canJoinAdamwGroup({a}, lr));
  // Ends exactly where a's gradient (bf16: 2 bytes an element) starts.
  AdamwMember adjacent = FakeAdamw::member(1);
  adjacent.tensor.newV = reinterpret_cast<float *>(
      reinterpret_cast<uintptr_t>(a.tensor.grad) - 4 * adjacent.tensor.n);
  EXPECT_TRUE(canJoinAdamwGroup({a}, adjacent));
  // Checked against every member, not only the first.
  AdamwMember third = FakeAdamw::member(2);
  third.tensor.m = FakeAdamw::member(1).tensor.newM;
  EXPECT_EQ(groupAdamw({a, FakeAdamw::member(1), third}),
            std::vector<int>({2, 1}));
}

TEST(AdamwGroups, EmptyTensorsOverlapNothing) {
  const AdamwMember a = FakeAdamw::member(0);
  AdamwMember empty = FakeAdamw::member(1, 0);
  empty.tensor.newParam = a.tensor.newParam;
  EXPECT_TRUE(canJoinAdamwGroup({a}, empty));
}

TEST(DeviceChoice, OneVisibleGpuIsEveryRanksOwn) {
  // srun --gpus-per-task=1: every rank sees its own GPU as device 0.
  for (int local = 0; local < 8; ++local) {
    auto d = chooseCudaDevice(1, local, 8, "3");
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    EXPECT_EQ(d.value(), 0) << "local rank " << local;
  }
  // One rank alone, nothing masked.
  EXPECT_EQ(chooseCudaDevice(1, 0, 0, nullptr).value(), 0);
}

TEST(DeviceChoice, EveryGpuVisibleTakesTheLocalRanks) {
  for (int local = 0; local < 8; ++local) {
    EXPECT_EQ(chooseCudaDevice(8, local, 8, nullptr).value(), local);
    // The launcher does not say how many ranks share the node.
    EXPECT_EQ(chooseCudaDevice(8, local, 0, nullptr).value(), local);
  }
  // More GPUs than ranks: each rank still takes its own.
  EXPECT_EQ(chooseCudaDevice(8, 3, 4, "0,1,2,3,4,5,6,7").value(), 3);
}

TEST(DeviceChoice, ErrorsNameTheCounts) {
  // srun --gpus-per-task=2 with 4 tasks: 2 visible for 4 ranks.
  auto few = chooseCudaDevice(2, 1, 4, "4,5");
  ASSERT_FALSE(few.isOk());
  EXPECT_EQ(few.status().code(), StatusCode::kUnavailable);
  const std::string &m = few.status().message();
  EXPECT_NE(m.find("2 visible CUDA devices"), std::string::npos) << m;
  EXPECT_NE(m.find("for 4 ranks on this node"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES=4,5"), std::string::npos) << m;
  // Local rank past the GPUs when the rank count is unknown.
  auto past = chooseCudaDevice(4, 5, 0, "");
  ASSERT_FALSE(past.isOk());
  EXPECT_NE(past.status().message().find("local rank 5 has no GPU"),
            std::string::npos)
      << past.status().message();
  EXPECT_NE(past.status().message().find("CUDA_VISIBLE_DEVICES unset"),
            std::string::npos);
  EXPECT_FALSE(chooseCudaDevice(0, 0, 1, nullptr).isOk());
  EXPECT_FALSE(chooseCudaDevice(4, -1, 4, nullptr).isOk());
}

TEST(CudaTables, CublasLtAlignmentOfEveryOperand) {
  auto at = [](uintptr_t address) {
    return reinterpret_cast<const void *>(address);
  };
  // Arenas are 256-byte aligned; plan buffers 64-byte; views anywhere.
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000000), 0, 1), 256u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000040), 0, 1), 64u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000080), 0, 1), 128u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000004), 0, 1), 4u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000002), 0, 1), 2u); // a bf16 view
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000001), 0, 1), 1u);
  // Every batch's matrix starts stride bytes after the last: a 17 x 24 f32
  // batch stride of 1632 bytes leaves 32-byte alignment.
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000000), 17 * 24 * 4, 3), 32u);
  // One batch: the stride does not matter; a shared operand (stride 0)
  // keeps its own.
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000000), 17 * 24 * 4, 1), 256u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000100), 0, 8), 256u);
  EXPECT_EQ(cublasLtAlignment(at(0x7f0000000100), 2 * 6, 2), 4u);
}

TEST(WatchList, OverdueEntryIsTheOldestIncomplete) {
  using Clock = WatchList::Clock;
  const Clock::time_point t0 = Clock::now();
  const int a = 0, b = 0, c = 0; // stand-ins for events
  std::set<const void *> done;
  auto isDone = [&](const void *e) { return done.count(e) > 0; };
  WatchList w;
  w.add(&a, "all_reduce a", t0 + std::chrono::seconds(10));
  w.add(&b, "send b", t0 + std::chrono::seconds(5));
  w.add(&c, "recv c", t0 + std::chrono::seconds(20));
  EXPECT_FALSE(w.sweep(isDone, t0 + std::chrono::seconds(1)));
  EXPECT_EQ(w.size(), 3u);
  // Past b's deadline: b, the earliest, whatever the insertion order.
  auto late = w.sweep(isDone, t0 + std::chrono::seconds(12));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->event, &b);
  EXPECT_EQ(late->description, "send b");
  // Completed entries go, anywhere in the list (several streams).
  done = {&b};
  late = w.sweep(isDone, t0 + std::chrono::seconds(12));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->event, &a);
  EXPECT_EQ(w.size(), 2u);
  done = {&a, &b};
  EXPECT_FALSE(w.sweep(isDone, t0 + std::chrono::seconds(12)));
  EXPECT_EQ(w.size(), 1u);
}

TEST(WatchList, RecordedAgainGetsAFreshDeadlineAndForgetStops) {
  using Clock = WatchList::Clock;
  const Clock::time_point t0 = Clock::now();
  const int a = 0;
  auto never = [](const void *) { return false; };
  WatchList w;
  w.add(&a, "step 1", t0 + std::chrono::seconds(5));
  // The instruction runs again: its event now marks the new operation.
  w.add(&a, "step 2", t0 + std::chrono::seconds(50));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_FALSE(w.sweep(never, t0 + std::chrono::seconds(10)));
  auto late = w.sweep(never, t0 + std::chrono::seconds(60));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->description, "step 2");
  // Forgotten (its event is about to be destroyed): never queried again.
  w.forget(&a);
  EXPECT_TRUE(w.empty());
  bool queried = false;
  EXPECT_FALSE(w.sweep(
      [&](const void *) {
        queried = true;
        return false;
      },
      t0 + std::chrono::seconds(100)));
  EXPECT_FALSE(queried);
}

} // namespace
} // namespace dtcc::runtime::cuda
