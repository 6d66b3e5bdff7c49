//===- TimeModel.cpp - predicted step time of a plan ----------------------===//

#include "planner/TimeModel.h"

#include "planner/MemoryModel.h"

#include <algorithm>
#include <set>
#include <cmath>
#include <limits>

namespace dtcc::planner {

const char *linkName(Link link) {
  switch (link) {
  case Link::kIntraNode:
    return "intra-node";
  case Link::kInterNode:
    return "inter-node";
  case Link::kPcie:
    return "pcie";
  }
  return "unknown";
}

const char *Timeline::streamName(int stream) {
  static const char *const names[] = {"compute", "tp comm", "pp send/recv",
                                      "dp comm", "offload"};
  return stream >= 0 && stream < 5 ? names[stream] : "other";
}

TimeModel::TimeModel(ModelDesc model, ClusterSpec cluster)
    : model_(std::move(model)), cluster_(std::move(cluster)) {}

double TimeModel::opTime(const OpCost &op, bool backward,
                         DType compute) const {
  const DeviceSpec &d = cluster_.device;
  double flops = backward ? op.bwdFlops : op.flops;
  double bytes = backward ? op.bwdBytes : op.bytes;
  double efficiency = op.kind == OpCost::Kind::kAttention
                          ? d.attentionEfficiency.value
                          : d.matmulEfficiency.value;
  double computeTime = flops / (d.peakFlops(compute) * efficiency);
  double memoryTime =
      bytes / (d.memoryBandwidth.value * d.memoryEfficiency.value);
  int kernels = backward ? op.bwdKernels : 1;
  return std::max(computeTime, memoryTime) + kernels * d.kernelOverhead.value;
}

double collectiveSeconds(const ClusterSpec &cluster, Collective kind,
                         double payloadBytes, int64_t groupSize, Link link,
                         int64_t ranksPerNode) {
  const LinkFigures f = linkFigures(cluster, link, ranksPerNode);
  if (link != Link::kInterNode || payloadBytes <= 0 || groupSize <= 1)
    return collectiveSeconds(kind, payloadBytes, groupSize, f.busBandwidth,
                             f.latency);
  // Across nodes only the steps that cross a node boundary pay the network
  // latency (NCCL's tuning model; collectiveLatency); the others at least
  // the network's post overhead, 3x for the bandwidth protocol (NCCL's
  // `intraLat = max(intraLat, netOverhead)`, SIMPLE x 3).
  const int64_t perNode = std::max<int64_t>(1, ranksPerNode);
  const int64_t nodes = (groupSize + perNode - 1) / perNode;
  const double intraStep =
      std::max(cluster.intraNode.latency.value,
               3 * cluster.interNode.postOverhead.value);
  return collectiveLatency(kind, groupSize, nodes, intraStep,
                           cluster.interNode.latency.value) +
         busVolume(kind, payloadBytes, groupSize) / f.busBandwidth;
}

LinkFigures linkFigures(const ClusterSpec &cluster, Link link,
                        int64_t ranksPerNode) {
  LinkFigures f;
  switch (link) {
  case Link::kIntraNode:
    f.busBandwidth = cluster.intraNode.busBandwidth();
    f.latency = cluster.intraNode.latency.value;
    break;
  case Link::kInterNode:
    f.busBandwidth = std::min(cluster.intraNode.busBandwidth(),
                              double(std::max<int64_t>(1, ranksPerNode)) *
                                  cluster.interNode.busBandwidth());
    f.latency = cluster.interNode.latency.value;
    break;
  case Link::kPcie:
    f.busBandwidth = cluster.pcieBandwidth.value;
    f.latency = 0;
    break;
  }
  return f;
}

GroupLink groupLink(const ClusterSpec &cluster,
                    const std::vector<int64_t> &ranks) {
  const int64_t perNode = std::max<int64_t>(1, cluster.perNode());
  std::set<int64_t> nodes;
  for (int64_t r : ranks)
    nodes.insert(r / perNode);
  GroupLink g;
  g.link = nodes.size() > 1 ? Link::kInterNode : Link::kIntraNode;
  g.perNode = std::max<int64_t>(1, int64_t(ranks.size()) /
                                       std::max<int64_t>(1, int64_t(nodes.size())));
  g.figures = linkFigures(cluster, g.link, g.perNode);
  return g;
}

const TimeModel::PartTimes &TimeModel::part(int kind,
                                            const Plan &plan) const {
  auto key = std::make_tuple(kind, plan.microBatchSize, plan.tp,
                             plan.sequenceParallel, int(plan.dtype.compute),
                             plan.cp);
  auto it = parts_.find(key);
  if (it != parts_.end())
    return it->second;
  LayerProfile profile = contextParallelProfile(
      kind, model_, plan.microBatchSize, plan.tp, plan.cp,
      plan.sequenceParallel, plan.dtype.compute);
  PartTimes times;
  for (const OpCost &op : profile.ops) {
    double forward = opTime(op, false, plan.dtype.compute);
    times.forward += forward;
    times.backward += opTime(op, true, plan.dtype.compute);
    if (op.attentionCore || op.kind == OpCost::Kind::kAttention) {
      if (op.attentionCore)
        times.coreForward += forward;
      times.coreBackward += opTime(op, true, plan.dtype.compute);
    }
  }
  times.cpForward = profile.cpCollectivesForward;
  times.cpBackward = profile.cpCollectivesBackward;
  times.cpPayload = profile.cpPayloadBytes;
  times.params = profile.params;
  times.tpForward = profile.tpCollectivesForward;
  times.tpBackward = profile.tpCollectivesBackward;
  times.tpPayload = profile.tpPayloadBytes;
  return parts_.emplace(key, times).first->second;
}

double TimeModel::exposedPart(double comm, double compute,
                              int64_t layers) const {
  if (comm <= 0)
    return 0;
  if (!overlaps())
    return comm;
  double lastBucket = comm / double(std::max<int64_t>(1, layers));
  double exposed = std::max(lastBucket, comm - compute);
  return exposed + cluster_.device.collectiveShare.value * (comm - exposed);
}

void TimeModel::stageCosts(const Plan &plan, TimeBreakdown &out,
                           std::vector<std::vector<double>> *chunkForward,
                           std::vector<std::vector<double>> *chunkBackward,
                           double &p2p) const {
  const int64_t p = plan.pp, m = plan.microBatches, dp = plan.dp;
  const int64_t t = plan.tp;
  const int64_t v =
      plan.schedule == Schedule::kInterleaved ? plan.virtualStages : 1;
  const int64_t perNode = cluster_.perNode();
  const DTypePolicy &dt = plan.dtype;
  const PartTimes &layer = part(0, plan);
  const PartTimes &embedding = part(1, plan);
  const PartTimes &head = part(2, plan);

  // Where each group's traffic goes: the links the ranks of rank 0's group
  // along each axis span, in the plan's rank order (Megatron-LM's tp
  // fastest, then dp, then pp, unless the user's mesh says otherwise).
  const runtime::MeshShape mesh = plan.mesh();
  const GroupLink tpGroup = groupLink(cluster_, mesh.group("tp"));
  const GroupLink dpGroup = groupLink(cluster_, mesh.group("dp"));
  const Link tpLink = tpGroup.link, dpLink = dpGroup.link;
  const int64_t tpPerNode = tpGroup.perNode, dpPerNode = dpGroup.perNode;
  const Link ppLink = groupLink(cluster_, mesh.group("pp")).link;

  // Tensor parallelism: one all-reduce (or all-gather + reduce-scatter with
  // sequence parallelism, the same bus volume) per collective point.
  double tpOne = 0;
  if (t > 1)
    tpOne = plan.sequenceParallel
                ? collectiveTime(Collective::kAllGather, layer.tpPayload, t,
                                 tpLink, tpPerNode) +
                      collectiveTime(Collective::kReduceScatter,
                                     layer.tpPayload, t, tpLink, tpPerNode)
                : collectiveTime(Collective::kAllReduce, layer.tpPayload, t,
                                 tpLink, tpPerNode);
  const bool full = plan.recompute == Recompute::kFull;
  double recomputeForward = full ? layer.forward
                            : plan.recompute == Recompute::kSelective
                                ? layer.coreForward
                                : 0;
  int layerTpForward = layer.tpForward;
  int layerTpBackward = layer.tpBackward + (full ? layer.tpForward : 0);

  // Context parallelism: each layer gathers the sequence's keys and values
  // over cp and reduce-scatters their gradients (a full recomputation
  // gathers again), hidden behind attention's compute where communication
  // overlaps: all but the first of the cp - 1 chunks a ring passes on.
  const int64_t cp = plan.cp;
  const GroupLink cpGroup = groupLink(cluster_, mesh.group("cp"));
  double cpF = 0, cpB = 0, cpExposedF = 0, cpExposedB = 0;
  if (cp > 1) {
    double gather = collectiveTime(Collective::kAllGather, layer.cpPayload,
                                   cp, cpGroup.link, cpGroup.perNode);
    double scatter = collectiveTime(Collective::kReduceScatter,
                                    layer.cpPayload, cp, cpGroup.link,
                                    cpGroup.perNode);
    cpF = layer.cpForward * gather;
    cpB = layer.cpBackward * scatter + (full ? layer.cpForward * gather : 0);
    cpExposedF = exposedPart(cpF, layer.coreForward, cp - 1);
    cpExposedB = exposedPart(cpB, layer.coreBackward, cp - 1);
  }


  // Pipeline send/recv of one micro-batch's boundary activation. Without
  // sequence parallelism each TP rank sends 1/t and the receiver all-gathers
  // over NVLink (Megatron's scatter-gather optimization).
  p2p = 0;
  double p2pPayload = 0;
  if (p > 1) {
    double boundary = double(plan.microBatchSize) * double(model_.seq) *
                      double(model_.hidden) * dtypeBytes(dt.compute);
    p2pPayload = boundary / double(t);
    p2p = collectiveTime(Collective::kSendRecv, p2pPayload, 2, ppLink);
    if (t > 1 && !plan.sequenceParallel)
      p2p += collectiveTime(Collective::kAllGather, boundary, t, tpLink,
                            tpPerNode);
  }

  out.stages.clear();
  out.stages.reserve(size_t(p));
  if (chunkForward) {
    chunkForward->assign(size_t(p), std::vector<double>(size_t(v), 0.0));
    chunkBackward->assign(size_t(p), std::vector<double>(size_t(v), 0.0));
  }

  struct StageExtra {
    double computeF = 0, computeB = 0, tpF = 0, tpB = 0;
    double dpExposed = 0, optimizer = 0, offloadExposed = 0;
    double perMbDpComm = 0, perMbDpExposed = 0;
    double endDpComm = 0, offloadComm = 0, embeddingSync = 0;
  };
  std::vector<StageExtra> extras(static_cast<size_t>(p));
  // ZeRO-3's gather units on stage s: its layers, plus the embedding on the
  // first stage and the head on the last.
  auto zeroUnits = [&](int64_t s) {
    return stageLayers(model_, p, s) + (s == 0 ? 1 : 0) + (s == p - 1 ? 1 : 0);
  };
  double pcie = cluster_.pcieBandwidth.value;
  double hostBandwidthPerRank =
      cluster_.hostMemoryBandwidth.value / double(perNode);

  for (int64_t s = 0; s < p; ++s) {
    StageTime st;
    StageExtra &x = extras[size_t(s)];
    st.stage = s;
    st.layers = stageLayers(model_, p, s);
    int64_t L = st.layers;
    double params = stageParameters(model_, plan, s);

    // Recompute only the first K layers of the stage: their share of the
    // recomputed forward, spread over the chunks.
    double recomputed = full && plan.recomputeLayers > 0 && L > 0
                            ? double(std::min(plan.recomputeLayers, L)) / double(L)
                            : 1.0;
    std::vector<double> f(size_t(v), 0.0), b(size_t(v), 0.0);
    for (int64_t c = 0; c < v; ++c) {
      double lc = double(L) / double(v);
      double computeF = lc * layer.forward;
      double computeB = lc * (layer.backward + recomputed * recomputeForward);
      double tpF = lc * layerTpForward * tpOne;
      double tpB = lc * (layerTpBackward -
                         (full ? (1.0 - recomputed) * layer.tpForward : 0.0)) *
                   tpOne;
      if (s == 0 && c == 0) {
        computeF += embedding.forward;
        computeB += embedding.backward;
        tpF += embedding.tpForward * tpOne;
        tpB += embedding.tpBackward * tpOne;
      }
      if (s == p - 1 && c == v - 1) {
        computeF += head.forward;
        computeB += head.backward;
        tpF += head.tpForward * tpOne;
        tpB += head.tpBackward * tpOne;
      }
      f[size_t(c)] = computeF + tpF + lc * cpExposedF;
      b[size_t(c)] = computeB + tpB + lc * cpExposedB;
      x.computeF += computeF;
      x.computeB += computeB;
      x.tpF += tpF;
      x.tpB += tpB;
    }

    // Data parallelism and ZeRO.
    double shard = params / double(plan.zeroStage >= 1 ? dp : 1);
    double gradPayload = params * plan.gradReduceBytes();
    double paramPayload = params * dt.paramBytes();
    bool offload = plan.offload != Offload::kNone;
    double d2h = offload ? shard * dt.gradBytes() / pcie : 0;
    double h2d = offload ? shard * dt.paramBytes() / pcie : 0;
    double perMbF = 0, perMbB = 0;
    if (dp > 1 || offload) {
      double ar = collectiveTime(Collective::kAllReduce, gradPayload, dp,
                                 dpLink, dpPerNode);
      double rs = collectiveTime(Collective::kReduceScatter, gradPayload, dp,
                                 dpLink, dpPerNode);
      double ag = collectiveTime(Collective::kAllGather, paramPayload, dp,
                                 dpLink, dpPerNode);
      switch (plan.zeroStage) {
      case 0:
        x.endDpComm = ar;
        x.dpExposed = exposedPart(ar, x.computeB, L);
        break;
      case 1:
        x.endDpComm = rs + ag;
        x.dpExposed = exposedPart(rs, x.computeB, L) +
                      exposedPart(ag, x.computeF, L);
        break;
      case 2: {
        // Gradients are reduce-scattered (and, offloaded, copied to the
        // host) every micro-batch; updated parameters are all-gathered once.
        double c = rs + d2h;
        x.perMbDpComm = c;
        perMbB = exposedPart(c, x.computeB, L);
        x.endDpComm = ag;
        x.dpExposed = exposedPart(ag, x.computeF, L);
        x.offloadExposed = offload ? h2d : 0; // updated shard to the device
        break;
      }
      case 3: {
        // Parameters are gathered for the forward and again for the
        // backward of every micro-batch, one unit at a time (PyTorch FSDP
        // and DeepSpeed ZeRO-3 wrap each transformer layer; the embedding
        // and the head are units of their own), and each unit's gradients
        // are reduce-scattered when its backward ends: one collective per
        // unit and pass, each paying its ring latency. With parameter
        // offload each rank's shard is first copied in from the host.
        const double units = double(zeroUnits(s));
        const double agUnits =
            units * collectiveTime(Collective::kAllGather,
                                   paramPayload / units, dp, dpLink,
                                   dpPerNode);
        const double rsUnits =
            units * collectiveTime(Collective::kReduceScatter,
                                   gradPayload / units, dp, dpLink,
                                   dpPerNode);
        double fetch =
            plan.offload == Offload::kOptimizerAndParams ? h2d : 0;
        double gather = agUnits + fetch;
        double c = gather + rsUnits + d2h;
        x.perMbDpComm = gather + c;
        // The first unit's gather of each pass has nothing to hide behind
        // (prefetch starts one unit ahead), the rest behind the compute.
        perMbF = exposedPart(gather, x.computeF, int64_t(units));
        perMbB = exposedPart(c, x.computeB, int64_t(units));
        if (plan.offload == Offload::kOptimizer)
          x.offloadExposed = h2d; // updated shard back to the device
        break;
      }
      }
      x.perMbDpExposed = perMbF + perMbB;
    }
    // Gradients are summed over cp too (every cp rank saw other positions):
    // one all-reduce of the stage's gradients after the backward pass.
    if (cp > 1) {
      double ar = collectiveTime(Collective::kAllReduce, gradPayload, cp,
                                 cpGroup.link, cpGroup.perNode);
      x.endDpComm += ar;
      x.dpExposed += exposedPart(ar, x.computeB, L);
    }
    // Spread per-micro-batch exposure over the chunks by their layers.
    for (int64_t c = 0; c < v; ++c) {
      f[size_t(c)] += perMbF / double(v);
      b[size_t(c)] += perMbB / double(v);
    }

    // Optimizer step: read weights, gradients, master and moments, write
    // weights, master and moments.
    double optimizerBytesPerParam =
        2 * dt.paramBytes() + dt.gradBytes() + 2 * dt.optimizerBytes();
    if (offload) {
      x.optimizer = shard * optimizerBytesPerParam / hostBandwidthPerRank;
      x.offloadComm = m * d2h + (plan.offload == Offload::kOptimizerAndParams
                                     ? 2 * m * h2d
                                     : h2d);
    } else {
      x.optimizer = shard * optimizerBytesPerParam /
                    (cluster_.device.memoryBandwidth.value *
                     cluster_.device.memoryEfficiency.value);
    }

    // Tied embeddings on different stages: their gradients are summed
    // between the first and the last stage after the pipeline drains.
    if (model_.tiedEmbeddings && p > 1 && (s == 0 || s == p - 1))
      x.embeddingSync = collectiveTime(
          Collective::kAllReduce,
          double(model_.paddedVocab(t)) * double(model_.hidden) / double(t) *
              dt.gradBytes(),
          2, ppLink);

    st.forward = 0;
    st.backward = 0;
    for (int64_t c = 0; c < v; ++c) {
      st.forward += f[size_t(c)];
      st.backward += b[size_t(c)];
    }
    st.tpComm = x.tpF + x.tpB;
    st.tail = x.dpExposed + x.optimizer + x.offloadExposed + x.embeddingSync;
    if (chunkForward) {
      (*chunkForward)[size_t(s)] = f;
      (*chunkBackward)[size_t(s)] = b;
    }
    out.stages.push_back(st);
  }

  // Pipeline: m micro-batches through the slowest stage plus the fill and
  // drain through the others (divided by v when interleaved).
  double maxU = 0, sumU = 0;
  int64_t critical = 0;
  for (int64_t s = 0; s < p; ++s) {
    const StageTime &st = out.stages[size_t(s)];
    double u = st.forward + st.backward + (p > 1 ? 2.0 * double(v) * p2p : 0);
    sumU += u;
    if (u > maxU) {
      maxU = u;
      critical = s;
    }
  }
  // The fill and drain: the other stages' work, divided by v when
  // interleaved. Under ZB-H1 their W tasks run in the drain instead of
  // waiting (Qi et al. 2023: (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F
  // + T_B + T_W)), which leaves T_F + T_B - T_W of each.
  double fill = sumU - maxU;
  if (plan.schedule == Schedule::kZeroBubbleH1) {
    double sumB = 0;
    for (int64_t s = 0; s < p; ++s)
      if (s != critical)
        sumB += out.stages[size_t(s)].backward;
    fill -= 2.0 * kWeightGradientShare * sumB;
  }
  out.pipelineTime = double(m) * maxU + (p > 1 ? fill / double(v) : 0.0);
  out.criticalStage = critical;
  int64_t tailStage = 0;
  for (int64_t s = 1; s < p; ++s)
    if (out.stages[size_t(s)].tail > out.stages[size_t(tailStage)].tail)
      tailStage = s;
  const StageExtra &cx = extras[size_t(critical)];
  const StageExtra &tx = extras[size_t(tailStage)];
  out.stepTime = out.pipelineTime + out.stages[size_t(tailStage)].tail;
  out.computeTime = double(m) * (cx.computeF + cx.computeB);
  out.tpCommTime = double(m) * (cx.tpF + cx.tpB);
  out.cpCommExposed = double(m) * double(out.stages[size_t(critical)].layers) *
                      (cpExposedF + cpExposedB);
  out.ppCommTime = p > 1 ? double(m) * 2.0 * double(v) * p2p : 0;
  out.bubbleTime = out.pipelineTime - double(m) * maxU;
  out.dpCommExposed =
      tx.dpExposed + tx.embeddingSync + double(m) * cx.perMbDpExposed;
  out.optimizerTime = tx.optimizer;
  out.offloadExposed = tx.offloadExposed;
  out.idealBubbleFraction =
      idealBubbleFraction(plan, out.stages[size_t(critical)].forward,
                          out.stages[size_t(critical)].backward);
  out.bubbleFraction =
      out.pipelineTime > 0 ? out.bubbleTime / out.pipelineTime : 0.0;

  // Communication per rank of the critical stage (the longest tail for the
  // data-parallel part).
  out.comm.clear();
  double tokensMb = double(plan.microBatchSize) * double(model_.seq);
  double tpPayload = tokensMb * double(model_.hidden) * dtypeBytes(dt.compute);
  auto add = [&](const char *group, const char *purpose, Collective kind,
                 Link link, int64_t n, double count, double payload,
                 double time, double exposed) {
    CommItem item;
    item.group = group;
    item.purpose = purpose;
    item.kind = kind;
    item.link = link;
    item.groupSize = n;
    item.count = count;
    item.payloadBytes = payload;
    item.busBytes = count * busVolume(kind, payload, n);
    item.time = time;
    item.exposed = exposed;
    out.comm.push_back(item);
  };
  if (t > 1 && tpOne > 0) {
    double perMb = (cx.tpF + cx.tpB) / tpOne;
    double count = double(m) * perMb;
    double time = double(m) * (cx.tpF + cx.tpB);
    if (plan.sequenceParallel) {
      add("tp", "activations", Collective::kAllGather, tpLink, t,
          count, tpPayload, time / 2, time / 2);
      add("tp", "activation gradients", Collective::kReduceScatter,
          tpLink, t, count, tpPayload, time / 2, time / 2);
    } else {
      add("tp", "activations", Collective::kAllReduce, tpLink, t,
          count, tpPayload, time, time);
    }
  }
  if (cp > 1) {
    double layers = double(out.stages[size_t(critical)].layers);
    double gathers = double(m) * layers * layer.cpForward;
    double scatters = double(m) * layers * layer.cpBackward;
    double gather = collectiveTime(Collective::kAllGather, layer.cpPayload,
                                   cp, cpGroup.link, cpGroup.perNode);
    double scatter = collectiveTime(Collective::kReduceScatter,
                                    layer.cpPayload, cp, cpGroup.link,
                                    cpGroup.perNode);
    double regather = full ? 2 : 1; // a full recomputation gathers again
    add("cp", "keys and values", Collective::kAllGather, cpGroup.link, cp,
        regather * gathers, layer.cpPayload, regather * gathers * gather,
        double(m) * layers * cpExposedF);
    add("cp", "key and value gradients", Collective::kReduceScatter,
        cpGroup.link, cp, scatters, layer.cpPayload, scatters * scatter,
        double(m) * layers * cpExposedB);
  }
  if (p > 1) {
    double count = double(m) * 2.0 * double(v);
    add("pp", "boundary activations", Collective::kSendRecv, ppLink, 2,
        count, p2pPayload, count * p2p, out.ppCommTime);
  }
  {
    int64_t s = tailStage;
    double params = stageParameters(model_, plan, s);
    double gradPayload = params * plan.gradReduceBytes();
    double paramPayload = params * dt.paramBytes();
    double shard = params / double(plan.zeroStage >= 1 ? dp : 1);
    int64_t L = out.stages[size_t(s)].layers;
    const StageExtra &x = extras[size_t(s)];
    if (dp > 1) {
      auto time = [&](Collective kind, double payload) {
        return collectiveTime(kind, payload, dp, dpLink, dpPerNode);
      };
      switch (plan.zeroStage) {
      case 0:
        add("dp", "gradients", Collective::kAllReduce, dpLink, dp, 1,
            gradPayload, time(Collective::kAllReduce, gradPayload),
            x.dpExposed);
        break;
      case 1:
        add("dp", "gradients", Collective::kReduceScatter, dpLink, dp, 1,
            gradPayload, time(Collective::kReduceScatter, gradPayload),
            exposedPart(time(Collective::kReduceScatter, gradPayload),
                        x.computeB, L));
        add("dp", "parameters", Collective::kAllGather, dpLink, dp, 1,
            paramPayload, time(Collective::kAllGather, paramPayload),
            exposedPart(time(Collective::kAllGather, paramPayload),
                        x.computeF, L));
        break;
      case 2:
        add("dp", "gradients", Collective::kReduceScatter, dpLink, dp,
            double(m), gradPayload,
            double(m) * time(Collective::kReduceScatter, gradPayload),
            double(m) * x.perMbDpExposed);
        add("dp", "parameters", Collective::kAllGather, dpLink, dp, 1,
            paramPayload, time(Collective::kAllGather, paramPayload),
            exposedPart(time(Collective::kAllGather, paramPayload),
                        x.computeF, L));
        break;
      case 3: {
        // One collective per unit (layer, embedding, head) and pass.
        const double units = double(zeroUnits(s));
        add("dp", "parameters", Collective::kAllGather, dpLink, dp,
            2.0 * double(m) * units, paramPayload / units,
            2.0 * double(m) * units *
                time(Collective::kAllGather, paramPayload / units),
            double(m) * x.perMbDpExposed);
        add("dp", "gradients", Collective::kReduceScatter, dpLink, dp,
            double(m) * units, gradPayload / units,
            double(m) * units *
                time(Collective::kReduceScatter, gradPayload / units),
            0);
        break;
      }
      }
    }
    if (cp > 1) {
      double ar = collectiveTime(Collective::kAllReduce, gradPayload, cp,
                                 cpGroup.link, cpGroup.perNode);
      add("cp", "gradients", Collective::kAllReduce, cpGroup.link, cp, 1,
          gradPayload, ar, exposedPart(ar, x.computeB, L));
    }
    if (x.embeddingSync > 0)
      add("embedding", "tied embedding gradients", Collective::kAllReduce,
          ppLink, 2, 1,
          double(model_.paddedVocab(t)) * double(model_.hidden) / double(t) *
              dt.gradBytes(),
          x.embeddingSync, x.embeddingSync);
    if (plan.offload != Offload::kNone) {
      double copies = plan.zeroStage >= 2 ? double(m) : 1.0;
      add("offload", "gradients to host", Collective::kCopy, Link::kPcie, 1,
          copies, shard * dt.gradBytes(), copies * shard * dt.gradBytes() / pcie,
          0);
      double fetches =
          plan.offload == Offload::kOptimizerAndParams ? 2.0 * double(m)
                                                       : 1.0;
      add("offload", "parameters to device", Collective::kCopy, Link::kPcie,
          1, fetches, shard * dt.paramBytes(),
          fetches * shard * dt.paramBytes() / pcie, 0);
    }
  }
}

TimeBreakdown TimeModel::estimate(const Plan &plan) const {
  TimeBreakdown out;
  double p2p = 0;
  stageCosts(plan, out, nullptr, nullptr, p2p);
  double tokens = double(plan.globalBatch()) * double(model_.seq);
  double devices = double(plan.devices());
  out.tokensPerStep = tokens;
  out.tokensPerSecond = tokens / out.stepTime;
  out.modelFlopsPerStep = tokens * model_.trainingFlopsPerToken(
                                       Recompute::kNone);
  out.hardwareFlopsPerStep =
      tokens * model_.trainingFlopsPerToken(plan.recompute);
  if (plan.recompute == Recompute::kFull && plan.recomputeLayers > 0) {
    // The first K layers of each stage recompute, not every layer.
    double recomputedLayers = 0;
    for (int64_t s = 0; s < plan.pp; ++s)
      recomputedLayers += double(
          std::min(plan.recomputeLayers, stageLayers(model_, plan.pp, s)));
    out.hardwareFlopsPerStep =
        tokens * (model_.trainingFlopsPerToken(Recompute::kNone) +
                  recomputedLayers * model_.layerForwardFlopsPerToken());
  }
  out.modelTflopsPerGpu = out.modelFlopsPerStep / out.stepTime / devices / 1e12;
  out.hardwareTflopsPerGpu =
      out.hardwareFlopsPerStep / out.stepTime / devices / 1e12;
  out.mfu = out.modelFlopsPerStep / out.stepTime / devices /
            cluster_.device.peakFlops(plan.dtype.compute);
  return out;
}

//===----------------------------------------------------------------------===//
// Pipeline schedules
//===----------------------------------------------------------------------===//

std::vector<PipelineTask> scheduleOrder(const Plan &plan, int64_t stage) {
  return pipelineOrder(plan.schedule, plan.pp, plan.microBatches,
                       plan.virtualStages, stage);
}

double idealBubbleFraction(const Plan &plan, double forward,
                           double backward) {
  const int64_t p = plan.pp, m = std::max<int64_t>(1, plan.microBatches);
  const int64_t v = plan.schedule == Schedule::kInterleaved
                        ? std::max<int64_t>(1, plan.virtualStages)
                        : 1;
  if (p <= 1)
    return 0.0;
  double ideal = double(p - 1) / (double(v) * double(m));
  const double u = forward + backward;
  if (plan.schedule == Schedule::kZeroBubbleH1 && u > 0)
    ideal *= (u - 2.0 * kWeightGradientShare * backward) / u;
  return ideal;
}

std::vector<PipelineTask>
simulatePipeline(const Plan &plan,
                 const std::vector<std::vector<double>> &forward,
                 const std::vector<std::vector<double>> &backward,
                 double p2p) {
  const int64_t p = plan.pp, m = plan.microBatches;
  const int64_t v =
      plan.schedule == Schedule::kInterleaved ? plan.virtualStages : 1;
  const bool split = plan.schedule == Schedule::kZeroBubbleH1;
  const double kNotDone = -1;
  // end[((s * m + mb) * v + c) * 3 + kind]: kind 0 forward, 1 backward
  // (B under ZB-H1), 2 W.
  std::vector<double> end(size_t(p * m * v * 3), kNotDone);
  auto index = [&](int64_t s, int64_t mb, int64_t c, int kind) {
    return size_t(((s * m + mb) * v + c) * 3 + kind);
  };
  std::vector<std::vector<PipelineTask>> orders;
  size_t tasks = 0;
  for (int64_t s = 0; s < p; ++s) {
    orders.push_back(scheduleOrder(plan, s));
    tasks += orders.back().size();
  }
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free(size_t(p), 0.0);
  std::vector<PipelineTask> done;
  done.reserve(tasks);
  const int64_t lastVirtual = p * v - 1;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      auto &order = orders[size_t(s)];
      while (next[size_t(s)] < order.size()) {
        PipelineTask task = order[next[size_t(s)]];
        int64_t c = task.chunk, mb = task.microBatch;
        int64_t virtualStage = c * p + s;
        double ready = 0;
        bool hasDep = true;
        size_t dep = 0;
        if (task.weight) {
          dep = index(s, mb, c, 1);
        } else if (!task.backward) {
          if (virtualStage == 0)
            hasDep = false;
          else if (s > 0)
            dep = index(s - 1, mb, c, 0);
          else
            dep = index(p - 1, mb, c - 1, 0);
        } else {
          if (virtualStage == lastVirtual)
            dep = index(s, mb, c, 0);
          else if (s < p - 1)
            dep = index(s + 1, mb, c, 1);
          else
            dep = index(0, mb, c + 1, 1);
        }
        if (hasDep) {
          if (end[dep] == kNotDone)
            break;
          ready = end[dep];
        }
        bool sends = !task.weight && (task.backward ? virtualStage > 0
                                                    : virtualStage < lastVirtual);
        double compute = (task.backward ? backward : forward)[size_t(s)][size_t(c)];
        if (split && task.backward)
          compute *= task.weight ? kWeightGradientShare
                                 : 1.0 - kWeightGradientShare;
        double duration = compute + (sends && p > 1 ? p2p : 0);
        task.start = std::max(ready, free[size_t(s)]);
        task.end = task.start + duration;
        free[size_t(s)] = task.end;
        end[index(s, mb, c, task.weight ? 2 : task.backward ? 1 : 0)] =
            task.end;
        done.push_back(task);
        ++next[size_t(s)];
        progress = true;
      }
    }
  }
  if (done.size() != tasks)
    return {}; // a schedule that deadlocks: a bug in scheduleOrder
  return done;
}

Timeline TimeModel::timeline(const Plan &plan) const {
  Timeline timeline;
  TimeBreakdown breakdown;
  std::vector<std::vector<double>> forward, backward;
  double p2p = 0;
  stageCosts(plan, breakdown, &forward, &backward, p2p);
  const int64_t p = plan.pp;
  for (int64_t s = 0; s < p; ++s)
    timeline.ranks.push_back(s * plan.dp * plan.tp);

  // Keep traces loadable: at most this many pipeline tasks.
  constexpr int64_t kMaxTasks = 200000;
  int64_t v = plan.schedule == Schedule::kInterleaved ? plan.virtualStages : 1;
  if (p * plan.microBatches * v * 2 > kMaxTasks) {
    timeline.truncated = true;
    timeline.stepTime = estimate(plan).stepTime;
    return timeline;
  }
  std::vector<PipelineTask> tasks =
      simulatePipeline(plan, forward, backward, p2p);
  std::vector<double> stageEnd(size_t(p), 0.0);
  for (const PipelineTask &task : tasks) {
    TraceEvent e;
    e.rank = timeline.ranks[size_t(task.stage)];
    e.stream = 0;
    const char *kind = task.weight     ? "weight gradients"
                       : task.backward ? "backward"
                                       : "forward";
    if (task.backward && !task.weight &&
        plan.schedule == Schedule::kZeroBubbleH1)
      kind = "input gradient";
    e.name = std::string(kind) + " mb" + std::to_string(task.microBatch);
    if (v > 1)
      e.name += " chunk" + std::to_string(task.chunk);
    e.category = task.backward ? "backward" : "forward";
    e.start = task.start;
    e.duration = task.end - task.start;
    timeline.events.push_back(e);
    const StageTime &st = breakdown.stages[size_t(task.stage)];
    double stageTotal = st.forward + st.backward;
    if (st.tpComm > 0 && stageTotal > 0) {
      // The TP collectives of the task, aggregated (they interleave with
      // its kernels on the critical path).
      double share = e.duration / stageTotal * st.tpComm;
      TraceEvent tp = e;
      tp.stream = 1;
      tp.name = "tp collectives";
      tp.category = "tp";
      tp.duration = share;
      tp.start = task.end - share;
      timeline.events.push_back(tp);
    }
    bool sends = task.weight ? false
                 : task.backward ? task.chunk * p + task.stage > 0
                                 : task.chunk * p + task.stage < p * v - 1;
    if (p > 1 && sends && p2p > 0) {
      TraceEvent send = e;
      send.stream = 2;
      send.name = std::string(task.backward ? "send grad" : "send act") +
                  " mb" + std::to_string(task.microBatch);
      send.category = "pp";
      send.start = task.end - p2p;
      send.duration = p2p;
      timeline.events.push_back(send);
    }
    stageEnd[size_t(task.stage)] =
        std::max(stageEnd[size_t(task.stage)], task.end);
  }
  for (int64_t s = 0; s < p; ++s) {
    const StageTime &st = breakdown.stages[size_t(s)];
    double at = stageEnd[size_t(s)];
    if (st.tail > 0) {
      TraceEvent tail;
      tail.rank = timeline.ranks[size_t(s)];
      tail.stream = 3;
      tail.name = "gradient sync + optimizer step";
      tail.category = "dp";
      tail.start = at;
      tail.duration = st.tail;
      timeline.events.push_back(tail);
    }
    timeline.stepTime = std::max(timeline.stepTime, at + st.tail);
  }
  return timeline;
}

} // namespace dtcc::planner
