//===- Plan.h - a distributed-training plan: decisions only -----*- C++ -*-===//
//
// The decisions the planner makes for a model on a cluster: the mesh
// (dp x pp x tp), ZeRO stage, micro-batching, pipeline schedule,
// recomputation, offload and the precision policy. Plans are saved and
// reused as JSON (--plan-out / --plan-in).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_PLAN_H
#define DTCC_PLANNER_PLAN_H

#include "planner/Cluster.h"
#include "planner/Model.h"
#include "planner/PipelineSchedule.h"
#include "runtime/base/MeshShape.h"

#include <optional>
#include <string>
#include <vector>

namespace dtcc::planner {

const char *scheduleName(Schedule schedule);

/// What lives in host memory instead of the device (ZeRO-Offload /
/// ZeRO-Infinity to CPU).
enum class Offload {
  kNone,
  /// Optimizer state and gradients in host memory; the optimizer step runs
  /// on the CPU (ZeRO-Offload, on top of ZeRO-2).
  kOptimizer,
  /// Also the parameter shards; each layer's shard is copied in before its
  /// all-gather (ZeRO-Infinity to CPU, on top of ZeRO-3).
  kOptimizerAndParams,
};
const char *offloadName(Offload offload);

/// Precision of every kind of training state. Adam keeps
/// `optimizerMoments` tensors (m, v) in `optimizerState`, plus an fp32 master
/// copy of the weights when `masterWeights` is set: ZeRO's K =
/// 4 * masterWeights + 4 * moments.
struct DTypePolicy {
  DType compute = DType::kBf16; ///< matmuls and activations
  DType params = DType::kBf16;  ///< weights used by forward and backward
  DType grads = DType::kBf16;
  bool masterWeights = true;
  DType optimizerState = DType::kFp32;
  int optimizerMoments = 2;
  bool lossScaling = false; ///< fp16 needs dynamic loss scaling

  /// bf16/fp16 compute, weights and gradients, fp32 master weights and Adam
  /// moments: 2 + 2 + 12 = 16 B/param (ZeRO's K = 12). fp16 adds loss
  /// scaling.
  static DTypePolicy mixed(DType half);
  /// fp32 weights, gradients and Adam moments, no master copy: 16 B/param.
  static DTypePolicy fp32();
  /// 16-bit weights and gradients with fp32 Adam moments and no master copy:
  /// 12 B/param, the assumption of the REFERENCES memory table.
  static DTypePolicy halfWithoutMaster(DType half);

  double paramBytes() const { return dtypeBytes(params); }
  double gradBytes() const { return dtypeBytes(grads); }
  /// Master weights plus moments, per parameter (ZeRO's K).
  double optimizerBytes() const {
    return (masterWeights ? 4.0 : 0.0) +
           optimizerMoments * double(dtypeBytes(optimizerState));
  }
  double bytesPerParam() const {
    return paramBytes() + gradBytes() + optimizerBytes();
  }
  /// "bf16 compute, bf16 weights and gradients, fp32 master weights, fp32
  /// Adam moments (16 B/param)".
  std::string describe() const;
};

/// One plan. dp * pp * cp * tp devices; each data-parallel rank runs
/// `microBatches` micro-batches of `microBatchSize` sequences per step,
/// each sequence split into `cp` chunks (context parallelism: the cp ranks
/// of a group hold one chunk each and gather keys and values for
/// attention).
struct Plan {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t cp = 1; ///< context parallel: ranks splitting each sequence
  int zeroStage = 0; ///< 0 (plain DP), 1 optimizer, 2 +gradients, 3 +params
  int64_t microBatchSize = 1;
  int64_t microBatches = 1;
  Schedule schedule = Schedule::k1F1B;
  int64_t virtualStages = 1; ///< layer chunks per device (interleaved)
  Recompute recompute = Recompute::kNone;
  /// With kFull: the first K layers of each pipeline stage recompute, the
  /// others keep their activations (Megatron's --recompute-num-layers,
  /// "block" method); 0: every layer.
  int64_t recomputeLayers = 0;
  bool sequenceParallel = false;
  Offload offload = Offload::kNone;
  /// Weight gradients summed over dp and cp at the compute type before they
  /// are widened to fp32 (FSDP's reduce_dtype = param_dtype), instead of
  /// widened first (the default, as Megatron-LM and FSDP's reduce_dtype
  /// float32); a plan file's `gradReduce`: "half" or "fp32". The compiler
  /// takes it with micro-batches only under ZeRO-2/3 without pp.
  bool halfGradReduce = false;
  DTypePolicy dtype;
  /// The mesh axes in rank order, outermost first (ranks lie row-major, the
  /// last axis fastest): Megatron-LM's pp, dp, tp by default; a user's
  /// `--mesh tp=2,dp=2` keeps its own order, and the time model prices each
  /// group on the links its ranks really span.
  /// `cp` may be left out of it: it then sits where Megatron-LM puts it,
  /// between dp and tp (tp fastest, then cp).
  std::vector<std::string> order = {"pp", "dp", "tp"};

  int64_t devices() const { return dp * pp * cp * tp; }
  /// The mesh in `order`, axes of size 1 left out (none for one device).
  runtime::MeshShape mesh() const;
  /// Whether the mesh's ranks lie as Megatron-LM's (pp, dp, tp; axes of
  /// size 1 may be anywhere).
  bool megatronOrder() const;
  int64_t globalBatch() const { return dp * microBatchSize * microBatches; }
  /// Bytes per parameter of the data-parallel gradient sums, as the
  /// compiler makes them: the fp32 master gradient under mixed precision
  /// (the default), the half gradient with halfGradReduce or without
  /// master weights.
  double gradReduceBytes() const {
    return dtype.masterWeights && !halfGradReduce ? 4.0 : dtype.gradBytes();
  }
  /// "dp=8 pp=4 tp=8, ZeRO-1, 64 micro-batches of 1, interleaved(v=2),
  /// recompute selective, sequence parallel"; a mesh in another order than
  /// Megatron-LM's adds it ("dp=2 pp=1 tp=2 (rank order tp=2,dp=2), ...").
  std::string summary() const;
  bool operator==(const Plan &other) const;
};

/// Layers on pipeline stage `stage`: as even as possible, with the extra
/// layers on the middle stages (the first holds the embedding, the last the
/// head).
int64_t stageLayers(const ModelDesc &model, int64_t pp, int64_t stage);
/// The most layers a stage of `pp` holds: ceil(layers / pp).
int64_t mostStageLayers(const ModelDesc &model, int64_t pp);

/// Why `plan` cannot run `model` on `cluster` at all (an indivisible
/// dimension, a group larger than a node, ...), or nullopt. Memory is not
/// checked here.
std::optional<std::string> planProblem(const Plan &plan,
                                       const ModelDesc &model,
                                       const ClusterSpec &cluster);

/// Why ZeRO in `plan` would leave most of `model`'s parameters whole, or
/// nullopt: the compiler splits a tensor over dp only along a dimension
/// whose block dp divides (it does not pad, as PyTorch FSDP and DeepSpeed
/// do), and every weight matrix of a block and the embedding have the
/// hidden size as one dimension. Such a plan runs, with the memory of
/// ZeRO-0 where the split is missing; a search does not choose it.
std::optional<std::string> zeroSplitProblem(const Plan &plan,
                                            const ModelDesc &model);

Json dtypePolicyToJson(const DTypePolicy &policy);
StatusOr<DTypePolicy> dtypePolicyFromJson(const Json &json);
Json planToJson(const Plan &plan);
/// Errors name the field ("plan.zeroStage: expected 0..3, got 5").
StatusOr<Plan> planFromJson(const Json &json);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_PLAN_H
