//===- MemoryModel.h - per-rank memory of a plan by category ----*- C++ -*-===//
//
// Bytes each rank holds at its peak: parameters, gradients, optimizer state,
// activations of the micro-batches in flight, temporaries and communication
// buffers, and what offload moves to host memory. The model-state part
// follows the ZeRO paper's accounting exactly.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_MEMORYMODEL_H
#define DTCC_PLANNER_MEMORYMODEL_H

#include "planner/Plan.h"

#include <map>
#include <tuple>

namespace dtcc::planner {

/// Per-rank bytes by category for one pipeline stage.
struct MemoryBreakdown {
  int64_t stage = 0;
  double parameters = 0;
  double gradients = 0;
  double optimizerState = 0;
  /// Activations kept for the backward pass of the micro-batches in flight.
  double activations = 0;
  /// Recompute working set, gradient buffers, logits; from a compiled
  /// program its constants, kernel scratch and fragmentation.
  double temporaries = 0;
  /// Gradient buckets, ZeRO-3 gathered layers, pipeline send/recv buffers,
  /// sequence-parallel all-gather outputs.
  double commBuffers = 0;
  /// What the runtime holds beside the program's memory: the CUDA context,
  /// library handles, allocator slack (the cluster's device.reservedBytes).
  double reserve = 0;
  /// Host memory this rank uses with offload.
  double hostParameters = 0;
  double hostGradients = 0;
  double hostOptimizerState = 0;
  /// Bytes the memory plan holds twice in the categories above but once in
  /// memory: on the CPU backend the gradients (and their collective's
  /// buffer) take the space of activations that the backward pass has
  /// freed, so the peak is the larger of the two, not their sum.
  double reused = 0;

  double total() const {
    return parameters + gradients + optimizerState + activations +
           temporaries + commBuffers + reserve - reused;
  }
  double modelState() const {
    return parameters + gradients + optimizerState;
  }
  double hostTotal() const {
    return hostParameters + hostGradients + hostOptimizerState;
  }
};

/// Parameters one rank of `stage` holds before ZeRO sharding (its layers'
/// share on its TP rank, plus the embedding on the first stage and the head
/// on the last; tied embeddings are held twice when pp > 1, as Megatron
/// does).
double stageParameters(const ModelDesc &model, const Plan &plan,
                       int64_t stage);

/// Micro-batch chunks whose activations stage `stage` holds at its peak
/// under the plan's schedule (a chunk is the stage's layers, or 1/v of them
/// when interleaved).
int64_t chunksInFlight(const Plan &plan, int64_t stage);

class MemoryModel {
public:
  MemoryModel(ModelDesc model, ClusterSpec cluster);

  /// Memory of one rank of pipeline stage `stage`.
  MemoryBreakdown stage(const Plan &plan, int64_t stage) const;
  /// The stage with the largest device total.
  MemoryBreakdown peak(const Plan &plan) const;
  /// Device memory capacity, bytes.
  double capacity() const { return cluster_.device.memoryBytes.value; }
  /// Host memory per rank (a node's memory shared by its devices).
  double hostCapacityPerRank() const {
    return cluster_.hostMemoryBytes.value / double(cluster_.perNode());
  }
  /// A lower bound of the peak device total of any plan that agrees with
  /// `plan` on mesh, ZeRO stage, offload and dtype: model state of the
  /// fullest stage plus the reserve. The search prunes with it.
  double lowerBound(const Plan &plan) const;

  /// Model state of `params` parameters per rank on `dp`-way data
  /// parallelism, as in the ZeRO paper (Rajbhandari et al. 2020): with
  /// `policy` = mixed precision, K = 12 and stage 0..3 give 16P, 4P + 12P/N,
  /// 2P + 14P/N and 16P/N bytes.
  static MemoryBreakdown modelState(double params, const DTypePolicy &policy,
                                    int zeroStage, int64_t dp,
                                    Offload offload = Offload::kNone);

  const ModelDesc &model() const { return model_; }
  const ClusterSpec &cluster() const { return cluster_; }

private:
  const LayerProfile &profile(int kind, const Plan &plan) const;
  /// stage() for the CPU backend: the compiled program's accounting.
  MemoryBreakdown cpuBackend(const Plan &plan, MemoryBreakdown m,
                             double params, const LayerProfile &layer,
                             const LayerProfile &embedding,
                             const LayerProfile &head) const;

  ModelDesc model_;
  ClusterSpec cluster_;
  /// Profiles by (kind: 0 layer, 1 embedding, 2 head; micro-batch, tp, sp,
  /// dtype, cp): identical layers are profiled once.
  mutable std::map<std::tuple<int, int64_t, int64_t, bool, int, int64_t>,
                   LayerProfile>
      profiles_;
};

} // namespace dtcc::planner

#endif // DTCC_PLANNER_MEMORYMODEL_H
