//===- PipelineSchedule.h - the order of a pipeline stage's tasks -*- C++ -*-===//
//
// The schedules a pipeline stage can run its micro-batches in, as the order
// of its forward and backward tasks. One definition for the planner (which
// simulates it) and the compiler (dtcc-shard-pipeline, which emits each
// stage's program in it); plain C++ without dependencies.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_PIPELINESCHEDULE_H
#define DTCC_PLANNER_PIPELINESCHEDULE_H

#include <cstdint>
#include <vector>

namespace dtcc::planner {

/// Pipeline schedules: GPipe, 1F1B (PipeDream-Flush), Megatron-LM's
/// interleaved 1F1B (virtualStages chunks per device), and ZB-H1 (Qi et al.
/// 2023: each backward split into B, the input gradient, and W, the weight
/// gradients, deferred into the drain; 1F1B's memory).
enum class Schedule { kGPipe, k1F1B, kInterleaved, kZeroBubbleH1 };

/// One task of a pipeline schedule (start and end: when simulated).
struct PipelineTask {
  int64_t stage = 0;
  int64_t microBatch = 0;
  int64_t chunk = 0;
  bool backward = false;
  /// ZB-H1: a backward task split into B (input gradient, `backward`) and W
  /// (weight gradients, `backward` and `weight`).
  bool weight = false;
  double start = 0;
  double end = 0;
};

/// The order in which stage `stage` of `stages` runs its tasks for
/// `microBatches` micro-batches: GPipe (all forwards, then all backwards),
/// 1F1B (PipeDream-Flush: stages - stage - 1 warm-up forwards, then one
/// forward and one backward in turn), Megatron-LM's interleaved 1F1B over
/// `virtualStages` chunks per stage (chunk c of stage s is virtual stage c *
/// stages + s; needs microBatches % stages == 0), or ZB-H1 (Qi et al. 2023:
/// 1F1B with each backward split into B and a W task that stage s defers
/// by s backwards). One stage: each micro-batch's forward then backward.
std::vector<PipelineTask> pipelineOrder(Schedule schedule, int64_t stages,
                                        int64_t microBatches,
                                        int64_t virtualStages, int64_t stage);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_PIPELINESCHEDULE_H
