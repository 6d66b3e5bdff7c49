//===- PipelineSchedule.cpp - the order of a pipeline stage's tasks -------===//

#include "planner/PipelineSchedule.h"

#include <algorithm>

namespace dtcc::planner {

std::vector<PipelineTask> pipelineOrder(Schedule schedule, int64_t p, int64_t m,
                                        int64_t v, int64_t stage) {
  std::vector<PipelineTask> order;
  auto task = [&](int64_t mb, int64_t chunk, bool backward,
                  bool weight = false) {
    PipelineTask t;
    t.stage = stage;
    t.microBatch = mb;
    t.chunk = chunk;
    t.backward = backward;
    t.weight = weight;
    order.push_back(t);
  };
  if (p == 1 || schedule == Schedule::kGPipe) {
    if (p == 1) {
      for (int64_t mb = 0; mb < m; ++mb) {
        task(mb, 0, false);
        task(mb, 0, true);
      }
      return order;
    }
    for (int64_t mb = 0; mb < m; ++mb)
      task(mb, 0, false);
    for (int64_t mb = 0; mb < m; ++mb)
      task(mb, 0, true);
    return order;
  }
  if (schedule == Schedule::k1F1B) {
    int64_t warmup = std::min(m, p - stage - 1);
    for (int64_t i = 0; i < warmup; ++i)
      task(i, 0, false);
    for (int64_t i = 0; i < m - warmup; ++i) {
      task(warmup + i, 0, false);
      task(i, 0, true);
    }
    for (int64_t i = m - warmup; i < m; ++i)
      task(i, 0, true);
    return order;
  }
  if (schedule == Schedule::kZeroBubbleH1) {
    // Qi et al. 2023, ZB-H1: 1F1B's forwards and input-gradient backwards
    // (B); stage s defers the W of its first s backwards, then runs one W
    // after each B, and the deferred ones at the end, where 1F1B's stage s
    // would wait for the drain.
    int64_t forward = 0, backward = 0, weight = 0;
    for (int64_t i = 0; i < p - stage - 1 && forward < m; ++i)
      task(forward++, 0, false);
    for (int64_t i = 0; i < stage && forward < m; ++i) {
      task(forward++, 0, false);
      task(backward++, 0, true);
    }
    while (forward < m) {
      task(forward++, 0, false);
      task(backward++, 0, true);
      task(weight++, 0, true, true);
    }
    while (backward < m) {
      task(backward++, 0, true);
      task(weight++, 0, true, true);
    }
    while (weight < m)
      task(weight++, 0, true, true);
    return order;
  }
  // Megatron-LM's interleaved 1F1B (needs m % p == 0).
  const int64_t total = m * v;
  auto microBatchOf = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
  auto forwardChunk = [&](int64_t k) { return (k / p) % v; };
  auto backwardChunk = [&](int64_t k) { return v - 1 - (k / p) % v; };
  int64_t warmup = std::min(total, 2 * (p - stage - 1) + (v - 1) * p);
  for (int64_t k = 0; k < warmup; ++k)
    task(microBatchOf(k), forwardChunk(k), false);
  for (int64_t i = 0; i < total - warmup; ++i) {
    int64_t k = warmup + i;
    task(microBatchOf(k), forwardChunk(k), false);
    task(microBatchOf(i), backwardChunk(i), true);
  }
  for (int64_t i = total - warmup; i < total; ++i)
    task(microBatchOf(i), backwardChunk(i), true);
  return order;
}

} // namespace dtcc::planner
