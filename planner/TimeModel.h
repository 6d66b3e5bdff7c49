//===- TimeModel.h - predicted step time of a plan --------------*- C++ -*-===//
//
// Per-op roofline compute, collectives by the nccl-tests bus-bandwidth
// formulas over the link they use, pipeline bubbles by schedule, and overlap
// of data-parallel communication with the backward pass. Produces the step
// time, throughput, MFU, communication by kind and link, and a per-rank
// timeline of one step.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_TIMEMODEL_H
#define DTCC_PLANNER_TIMEMODEL_H

#include "planner/CostPrimitives.h"
#include "planner/Plan.h"

#include <map>
#include <tuple>
#include <vector>

namespace dtcc::planner {

enum class Link { kIntraNode, kInterNode, kPcie };
/// "intra-node", "inter-node", "pcie".
const char *linkName(Link link);

/// The traffic of one kind on one group per step, per rank.
struct CommItem {
  const char *group = "";   ///< "tp", "dp", "pp", "embedding", "offload"
  const char *purpose = ""; ///< "activations", "gradients", "parameters"
  Collective kind = Collective::kAllReduce;
  Link link = Link::kIntraNode;
  int64_t groupSize = 1;
  double count = 0;        ///< operations per step
  double payloadBytes = 0; ///< buffer size of one operation
  /// Bytes each rank puts on the link per step: the nccl-tests bus volume
  /// (2(n-1)/n of the payload for all-reduce, (n-1)/n for all-gather and
  /// reduce-scatter, the payload for send/recv and copies) times count.
  double busBytes = 0;
  double time = 0;    ///< seconds per step these operations take
  double exposed = 0; ///< seconds of them on the step's critical path
};

/// The bus bandwidth and latency a collective sees on `link` of `cluster`:
/// NVLink inside a node; across nodes, a group with `ranksPerNode` members
/// in each node drives that many NICs per node, capped by NVLink; PCIe
/// copies without latency.
struct LinkFigures {
  double busBandwidth = 0, latency = 0;
};
LinkFigures linkFigures(const ClusterSpec &cluster, Link link,
                        int64_t ranksPerNode = 1);

/// The link a group of ranks communicates on: ranks are numbered node by
/// node (cluster.perNode() each), so a group is intra-node when all its
/// members share a node; otherwise it has `perNode` members in each node it
/// spans. The one answer for the program model, the layout search's
/// figures and the planner: the caller lists the group's real members
/// (runtime::MeshShape::group gives them for a mesh axis in its order).
struct GroupLink {
  Link link = Link::kIntraNode;
  int64_t perNode = 1;
  LinkFigures figures;
};
GroupLink groupLink(const ClusterSpec &cluster,
                    const std::vector<int64_t> &ranks);

/// Seconds for one collective with a `payloadBytes` buffer over
/// `groupSize` ranks on `cluster`: latency x min(ring, tree steps) + bus
/// volume / bus bandwidth (nccl-tests). Groups that span nodes with
/// `ranksPerNode` members in each node use that many NICs per node, and
/// pay the network's latency only on the steps that cross nodes
/// (collectiveLatency: NCCL's tuning model).
double collectiveSeconds(const ClusterSpec &cluster, Collective kind,
                         double payloadBytes, int64_t groupSize, Link link,
                         int64_t ranksPerNode = 1);

/// One pipeline stage's costs. Forward and backward are per micro-batch for
/// the whole stage (all its chunks), including the tensor-parallel
/// collectives and exposed ZeRO traffic; the backward includes
/// recomputation.
struct StageTime {
  int64_t stage = 0;
  int64_t layers = 0;
  double forward = 0;
  double backward = 0;
  double tpComm = 0; ///< tensor-parallel part of forward + backward
  /// After the last backward: exposed data-parallel communication, the
  /// optimizer step, exposed offload transfers.
  double tail = 0;
};

struct TimeBreakdown {
  double stepTime = 0;
  /// First forward to last backward of the pipeline.
  double pipelineTime = 0;
  /// Of the critical (slowest) stage over the step: kernels, tensor-parallel
  /// collectives, pipeline send/recv, idle time in the pipeline (bubble).
  double computeTime = 0;
  double tpCommTime = 0;
  /// Context parallelism: the key/value gathers and gradient
  /// reduce-scatters attention's compute does not hide.
  double cpCommExposed = 0;
  double ppCommTime = 0;
  double bubbleTime = 0;
  /// After the pipeline: exposed data-parallel and offload communication,
  /// optimizer step (of the stage whose tail is longest).
  double dpCommExposed = 0;
  double optimizerTime = 0;
  double offloadExposed = 0;
  /// (p - 1) / m, or (p - 1) / (v m) interleaved, or under ZB-H1 (p - 1) /
  /// m x (T_F + T_B - T_W) / (T_F + T_B + T_W) (a third of 1F1B's when B and
  /// W each take a forward's time).
  double idealBubbleFraction = 0;
  /// bubbleTime / pipelineTime.
  double bubbleFraction = 0;
  double tokensPerStep = 0;
  double tokensPerSecond = 0;
  /// FLOPs per step without recomputation (model FLOPs) and as executed.
  double modelFlopsPerStep = 0;
  double hardwareFlopsPerStep = 0;
  double modelTflopsPerGpu = 0;
  /// Counting recomputation: Megatron-LM's reported TFLOP/s.
  double hardwareTflopsPerGpu = 0;
  /// Model FLOP/s over the peak of the compute dtype.
  double mfu = 0;
  int64_t criticalStage = 0;
  std::vector<StageTime> stages;
  std::vector<CommItem> comm;
};

/// pipelineOrder for the plan's schedule, pp, micro-batches and chunks.
std::vector<PipelineTask> scheduleOrder(const Plan &plan, int64_t stage);

/// The share of a layer's backward that computes its weight gradients (W
/// under ZB-H1): a matmul's backward is two matmuls of its forward's size,
/// dX = dY W^T and dW = X^T dY, so one half (Qi et al. 2023 take T_W =
/// T_B as well).
constexpr double kWeightGradientShare = 0.5;

/// The plan's ideal pipeline bubble (TimeBreakdown::idealBubbleFraction)
/// when a micro-batch's forward takes `forward` and its backward `backward`
/// seconds on a stage; 0 without a pipeline.
double idealBubbleFraction(const Plan &plan, double forward, double backward);

/// Runs the schedule with `forward[s][c]` / `backward[s][c]` seconds per
/// micro-batch for chunk c of stage s and `p2p` seconds per transfer
/// between stages; returns every task with its start and end. Under ZB-H1
/// a backward's W takes kWeightGradientShare of it and B the rest.

std::vector<PipelineTask>
simulatePipeline(const Plan &plan,
                 const std::vector<std::vector<double>> &forward,
                 const std::vector<std::vector<double>> &backward,
                 double p2p);

/// An event of a Chrome trace: `rank` is the pid, `stream` the tid.
struct TraceEvent {
  int64_t rank = 0;
  int stream = 0; ///< 0 compute, 1 tp, 2 pp, 3 dp, 4 offload
  std::string name;
  const char *category = "";
  double start = 0;
  double duration = 0;
};

/// One predicted step for one representative rank per pipeline stage (dp
/// index 0, tp index 0: rank = stage * dp * tp; the other ranks of a stage
/// run the same timeline).
struct Timeline {
  std::vector<int64_t> ranks;
  std::vector<TraceEvent> events;
  double stepTime = 0;
  bool truncated = false; ///< more tasks than the trace keeps
  static const char *streamName(int stream);
};

class TimeModel {
public:
  TimeModel(ModelDesc model, ClusterSpec cluster);

  /// Predicted step of `plan` (which must pass planProblem).
  TimeBreakdown estimate(const Plan &plan) const;
  /// The step as a timeline of every stage (a simulation of the schedule).
  Timeline timeline(const Plan &plan) const;

  /// collectiveSeconds on this model's cluster.
  double collectiveTime(Collective kind, double payloadBytes,
                        int64_t groupSize, Link link,
                        int64_t ranksPerNode = 1) const {
    return collectiveSeconds(cluster_, kind, payloadBytes, groupSize, link,
                             ranksPerNode);
  }
  /// Roofline time of an op: max(FLOPs / (peak x efficiency), bytes /
  /// (bandwidth x efficiency)) + kernel overhead.
  double opTime(const OpCost &op, bool backward, DType compute) const;

  const ModelDesc &model() const { return model_; }
  const ClusterSpec &cluster() const { return cluster_; }

private:
  struct PartTimes {
    double forward = 0, backward = 0, coreForward = 0;
    double params = 0;
    int tpForward = 0, tpBackward = 0;
    double tpPayload = 0;
    /// Context parallelism: attention's backward, which hides the key and
    /// value gradients' reduce-scatters as the forward hides the gathers.
    double coreBackward = 0;
    int cpForward = 0, cpBackward = 0;
    double cpPayload = 0;
  };
  /// Whether communication can hide behind compute: not on CPU ranks, whose
  /// collectives (MPI copies, TCP) run on the cores that compute.
  bool overlaps() const { return !cluster_.device.isCpu(); }
  /// The part of `comm` the step waits for when it runs alongside
  /// `compute` covering `layers` layers: at least the last layer's share
  /// (its bucket can only start when the computation that produces it
  /// ends), plus, on GPUs, the computation it slowed while they ran
  /// together (`device.collectiveShare` of that time, as the program
  /// simulator prices it). Without overlap (CPU ranks), all of it.
  double exposedPart(double comm, double compute, int64_t layers) const;
  /// kind: 0 layer, 1 embedding, 2 head. Cached: identical layers are
  /// solved once.
  const PartTimes &part(int kind, const Plan &plan) const;
  /// Per-stage forward/backward per chunk, plus the comm items and tails.
  void stageCosts(const Plan &plan, TimeBreakdown &out,
                  std::vector<std::vector<double>> *chunkForward,
                  std::vector<std::vector<double>> *chunkBackward,
                  double &p2p) const;

  ModelDesc model_;
  ClusterSpec cluster_;
  mutable std::map<std::tuple<int, int64_t, int64_t, bool, int, int64_t>,
                   PartTimes>
      parts_;
};

} // namespace dtcc::planner

#endif // DTCC_PLANNER_TIMEMODEL_H
