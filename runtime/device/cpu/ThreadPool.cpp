//===- ThreadPool.cpp - the CPU kernels' threads --------------------------===//

#include "runtime/device/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace dtcc::runtime::cpu {

int cpuThreads() {
  static const int threads = [] {
    for (const char *name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      if (const char *v = std::getenv(name)) {
        int n = std::atoi(v);
        if (n > 0)
          return n;
      }
    return std::max(1, int(std::thread::hardware_concurrency()));
  }();
  return threads;
}

namespace {

/// One spin-wait step: the CPU's pause hint where there is one.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// How long an idle worker polls for the next loop before it sleeps
/// (pause steps, ~30-100 us): a step's loops follow each other within
/// microseconds, and waking a sleeping thread costs tens to hundreds of
/// microseconds on a virtual machine's scheduler. The caller polls for the
/// end of its loop the same way. Polling never holds a core another thread
/// needs: the pool's threads are the rank's only compute threads (the
/// matrix products run on them too: MatmulKernels.cpp).
constexpr int kSpinSteps = 1 << 12;

/// Workers 1..threads-1, started on the first split loop. One loop at a
/// time: a second caller (another thread of the rank, e.g. a collective's
/// reduction on the communication thread) runs its loop alone.
class Pool {
public:
  static Pool &get() {
    static Pool *pool = new Pool(cpuThreads()); // never joined: lives to exit
    return *pool;
  }

  int threads() const { return threads_; }

  /// False when another loop holds the pool.
  bool tryRun(int64_t n, int parts,
              const std::function<void(int64_t, int64_t, int)> &fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock())
      return false;
    fn_ = &fn;
    n_ = n;
    pending_.store(parts - 1, std::memory_order_relaxed);
    // Publishes fn_, n_ and pending_ to the workers (seq_cst: ordered with
    // the read of sleepers_ below, see work()).
    state_.store(((state_.load(std::memory_order_relaxed) >> kPartsBits) + 1)
                     << kPartsBits |
                 uint64_t(parts));
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    fn(0, n / parts, 0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;) {
      if (++spins < kSpinSteps)
        relax();
      else
        std::this_thread::yield();
    }
    fn_ = nullptr;
    return true;
  }

private:
  explicit Pool(int threads) : threads_(threads) {
    for (int t = 1; t < threads_; ++t)
      std::thread([this, t] { work(t); }).detach();
  }

  void work(int t) {
    uint64_t seen = 0;
    for (;;) {
      // Poll, then sleep until the state moves. A caller that moves it
      // reads sleepers_ afterwards and a worker going to sleep bumps
      // sleepers_ before it reads the state (both seq_cst), so one of them
      // sees the other: no wake-up is lost.
      uint64_t now = state_.load(std::memory_order_acquire);
      for (int spins = 0; now == seen && spins < kSpinSteps; ++spins) {
        relax();
        now = state_.load(std::memory_order_acquire);
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return state_.load() != seen; });
        sleepers_.fetch_sub(1);
        now = state_.load(std::memory_order_acquire);
      }
      seen = now;
      // The loop's parts come with its generation in one word: a worker
      // with no part reads nothing else (its caller does not wait for it
      // and may already be publishing the next loop); one with a part is
      // waited for, so fn_ and n_ stay this loop's until it is done.
      const int parts = int(now & ((uint64_t(1) << kPartsBits) - 1));
      if (t >= parts)
        continue;
      (*fn_)(n_ * t / parts, n_ * (t + 1) / parts, t);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  const int threads_;
  std::mutex busy_;  ///< held by the loop running
  std::mutex mutex_; ///< with wake_: sleeping workers
  std::condition_variable wake_;
  static constexpr int kPartsBits = 16;
  /// The loop's generation (high bits) and its number of parts.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> pending_{0};
  /// The loop running: written by its caller before the state moves.
  const std::function<void(int64_t, int64_t, int)> *fn_ = nullptr;
  int64_t n_ = 0;
};

} // namespace

void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t, int)> &fn) {
  if (n <= 0)
    return;
  const int threads = cpuThreads();
  const int64_t fit = grain > 0 ? n / grain : n;
  const int parts = int(std::min<int64_t>(threads, fit));
  if (parts < 2 || !Pool::get().tryRun(n, parts, fn))
    fn(0, n, 0);
}

} // namespace dtcc::runtime::cpu
