//===- ThreadPool.h - the CPU kernels' threads ------------------*- C++ -*-===//
//
// dtcc's own CPU kernels split large loops over the rank's threads: as many
// as OpenBLAS uses (OMP_NUM_THREADS, else OPENBLAS_NUM_THREADS, else every
// core of the machine, as OpenBLAS does), so one setting governs the
// matrix products and the rest of the step. The threads are started once,
// wait while nothing is split, and the calling thread works on a share of
// every loop. Kernels split only work whose results do not depend on the
// split (each element or row computed by one thread in the same order), so
// a step's results are bitwise the same for every thread count.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_THREADPOOL_H
#define DTCC_RUNTIME_DEVICE_CPU_THREADPOOL_H

#include <algorithm>
#include <cstdint>
#include <functional>

namespace dtcc::runtime::cpu {

/// The threads the CPU kernels use: OMP_NUM_THREADS, else
/// OPENBLAS_NUM_THREADS, else the machine's cores; read once.
int cpuThreads();

/// Calls `fn(begin, end, worker)` on disjoint ranges covering [0, n), on up
/// to cpuThreads() threads (worker 0 is the caller), each range at least
/// `grain` long: fewer threads for small n, and the caller alone when
/// n < 2 * grain or one thread is configured. Returns when every range is
/// done. Not reentrant: `fn` must not call parallelFor.
void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t, int)> &fn);

/// Elements below which an elementwise loop stays on one thread (waking the
/// others costs more than it saves).
inline constexpr int64_t kParallelGrain = 1 << 15;

/// Multiply-adds worth a thread of a matrix product or a convolution: the
/// products' pieces are cut at about this size (MatmulKernels.cpp), a
/// convolution gets one OpenMP thread per this much work (ConvKernels.cpp).
inline constexpr int64_t kParallelMacs = int64_t(1) << 22;

/// The grain, in items, of a loop whose items are `work` elements of work
/// each (a row's, a channel's, a plane's): kParallelGrain elements' worth,
/// at least one item.
inline int64_t parallelGrain(int64_t work) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, work));
}

/// Calls `fn(i, worker)` for every i in [0, n), each index on one thread,
/// the indices split over the threads by parallelFor with
/// parallelGrain(work).
template <typename F> void parallelForEach(int64_t n, int64_t work, F &&fn) {
  parallelFor(n, parallelGrain(work),
              [&](int64_t begin, int64_t end, int worker) {
                for (int64_t i = begin; i < end; ++i)
                  fn(i, worker);
              });
}

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_THREADPOOL_H
