//===- P2POrder.cpp - sends and receives meet in order --------------------===//

#include "runtime/exec/P2POrder.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

namespace dtcc::runtime {
namespace {

struct Message {
  int64_t tag = 0;
  std::string node;
};

/// The point-to-point messages of one function, by (axes, offset), in
/// instruction order.
struct Traffic {
  const format::Function *fn = nullptr;
  int64_t stage = -1;
  std::map<std::pair<std::string, int64_t>, std::vector<Message>> sends, recvs;
};

std::string axesOf(const format::Instruction &inst) {
  auto it = inst.attrs().find("axes");
  if (it == inst.attrs().end())
    return "";
  if (!it->second.has_strings())
    return it->second.s();
  std::string joined;
  for (const std::string &a : it->second.strings().values())
    joined += (joined.empty() ? "" : ",") + a;
  return joined;
}

int64_t intAttr(const format::Instruction &inst, const char *name) {
  auto it = inst.attrs().find(name);
  return it == inst.attrs().end() ? 0 : it->second.i();
}

/// "train_step" for "train_step_pp2" of stage 2.
std::string familyOf(const format::Function &fn) {
  if (!fn.has_stage())
    return fn.name();
  const std::string suffix = "_pp" + std::to_string(fn.stage());
  const std::string &name = fn.name();
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

std::string who(const Traffic &t) {
  return t.stage >= 0
             ? strCat("function '", t.fn->name(), "' (pipeline stage ",
                      t.stage, ")")
             : strCat("function '", t.fn->name(), "'");
}

} // namespace

Status checkP2POrder(const format::Program &program) {
  std::vector<Traffic> traffic;
  std::map<std::pair<std::string, int64_t>, size_t> byStage;
  for (const format::Function &fn : program.functions()) {
    Traffic t;
    t.fn = &fn;
    t.stage = fn.has_stage() ? fn.stage() : -1;
    bool any = false;
    for (const format::Instruction &inst : fn.instructions()) {
      const bool send = inst.kernel() == "send";
      if (!send && inst.kernel() != "recv")
        continue;
      any = true;
      auto &list = send ? t.sends : t.recvs;
      list[{axesOf(inst), intAttr(inst, "offset")}].push_back(
          {intAttr(inst, "tag"), inst.location()});
    }
    if (!any)
      continue;
    if (t.stage >= 0)
      byStage[{familyOf(fn), t.stage}] = traffic.size();
    traffic.push_back(std::move(t));
  }
  for (const Traffic &from : traffic) {
    for (const auto &[key, sent] : from.sends) {
      const auto &[axes, offset] = key;
      // Who runs the receiving side: another stage's function over pp.
      const Traffic *to = &from;
      if (axes == "pp" && from.stage >= 0) {
        auto it = byStage.find({familyOf(*from.fn), from.stage + offset});
        if (it == byStage.end())
          return invalidArgument(
              who(from), " sends ", sent.size(), " message",
              sent.size() == 1 ? "" : "s", " to pipeline stage ",
              from.stage + offset, " (first: tag ", sent[0].tag, " at node '",
              sent[0].node, "'), which receives none");
        to = &traffic[it->second];
      }
      static const std::vector<Message> kNone;
      auto r = to->recvs.find({axes, -offset});
      const std::vector<Message> &received =
          r == to->recvs.end() ? kNone : r->second;
      const std::string peer =
          to == &from ? strCat("its peer at offset ", offset, " on axes '",
                               axes, "'")
                      : who(*to);
      for (size_t i = 0; i < std::max(sent.size(), received.size()); ++i) {
        if (i >= received.size())
          return invalidArgument(
              who(from), " sends ", sent.size(), " messages over axes '", axes,
              "' to ", peer, ", which receives ", received.size(),
              ": tag ", sent[i].tag, " (node '", sent[i].node,
              "') is never received");
        if (i >= sent.size())
          return invalidArgument(
              peer, " receives tag ", received[i].tag, " (node '",
              received[i].node, "') from ", who(from),
              ", which sends only ", sent.size(), " messages");
        if (sent[i].tag != received[i].tag)
          return invalidArgument(
              "message ", i + 1, " from ", who(from), " to ", peer,
              " over axes '", axes, "' is tag ", sent[i].tag, " (node '",
              sent[i].node, "'), but receive ", i + 1, " from it is tag ",
              received[i].tag, " (node '", received[i].node,
              "'): receives must come in the order of the sends (NCCL "
              "matches the messages between two ranks by order, not by "
              "tag)");
      }
    }
  }
  // Receives nobody sends.
  for (const Traffic &to : traffic)
    for (const auto &[key, received] : to.recvs) {
      const auto &[axes, offset] = key;
      const Traffic *from = &to;
      if (axes == "pp" && to.stage >= 0) {
        auto it = byStage.find({familyOf(*to.fn), to.stage + offset});
        from = it == byStage.end() ? nullptr : &traffic[it->second];
      }
      if (!from || !from->sends.count({axes, -offset}))
        return invalidArgument(who(to), " receives tag ", received[0].tag,
                               " (node '", received[0].node,
                               "') over axes '", axes, "' from offset ",
                               offset, ", which sends nothing to it");
    }
  return Status::ok();
}

} // namespace dtcc::runtime
