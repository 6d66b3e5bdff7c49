//===- ThreadPool.cpp - the CPU kernels' threads --------------------------===//

#include "runtime/device/cpu/ThreadPool.h"

#include <algorithm>
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    wake_.notify_all();
    fn(0, n / parts, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
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
      const std::function<void(int64_t, int64_t, int)> *fn;
      int64_t n;
      int parts;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        fn = fn_;
        n = n_;
        parts = parts_;
      }
      if (t >= parts)
        continue;
      (*fn)(n * t / parts, n * (t + 1) / parts, t);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0)
        done_.notify_one();
    }
  }

  const int threads_;
  std::mutex busy_;  ///< held by the loop running
  std::mutex mutex_; ///< guards what follows
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t, int)> *fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 1;
  int pending_ = 0;
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
