//===- P2POrderTest.cpp - sends and receives meet in order ----------------===//
//
// Hand-built programs of pipeline stages: the load-time check accepts the
// receive orders that NCCL (which matches by order) and the CPU backend
// (which matches by tag) both deliver alike, and names the first message
// that would differ otherwise.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/P2POrder.h"

#include <gtest/gtest.h>

namespace dtcc::runtime {
namespace {

struct Op {
  bool send;
  int64_t offset, tag;
  std::string axes = "pp";
};

format::Function *stage(format::Program &p, const std::string &name,
                        int64_t stage, const std::vector<Op> &ops) {
  format::Function *f = p.add_functions();
  f->set_name(name);
  if (stage >= 0)
    f->set_stage(stage);
  for (const Op &op : ops) {
    format::Instruction *i = f->add_instructions();
    i->set_kernel(op.send ? "send" : "recv");
    (*i->mutable_attrs())["axes"].set_s(op.axes);
    (*i->mutable_attrs())["offset"].set_i(op.offset);
    (*i->mutable_attrs())["tag"].set_i(op.tag);
    i->set_location(strCat(op.send ? "send" : "recv", "/", op.tag));
  }
  return f;
}

Op send(int64_t offset, int64_t tag) { return {true, offset, tag}; }
Op recv(int64_t offset, int64_t tag) { return {false, offset, tag}; }

TEST(P2POrder, ReceivesInTheSendersOrderPass) {
  // A 1F1B pair: forward activations down, gradients back, interleaved.
  format::Program p;
  stage(p, "train_step_pp0", 0,
        {send(1, 0), send(1, 2), recv(1, 1), send(1, 4), recv(1, 3),
         recv(1, 5)});
  stage(p, "train_step_pp1", 1,
        {recv(-1, 0), send(-1, 1), recv(-1, 2), send(-1, 3), recv(-1, 4),
         send(-1, 5)});
  // Tags need not increase: only the order matters.
  stage(p, "eval_pp0", 0, {send(1, 9), send(1, 7)});
  stage(p, "eval_pp1", 1, {recv(-1, 9), recv(-1, 7)});
  // A function without stages talking to itself on its neighbours.
  stage(p, "exchange", -1,
        {Op{true, 1, 3, "tp"}, Op{false, -1, 3, "tp"}, Op{true, 1, 4, "tp"},
         Op{false, -1, 4, "tp"}});
  Status s = checkP2POrder(p);
  EXPECT_TRUE(s.isOk()) << s.toString();
}

TEST(P2POrder, ReceivesOutOfOrderAreNamed) {
  // Stage 1 reads the second value first: the CPU backend would deliver by
  // tag, NCCL would hand tag 0's bytes to the receive of tag 1.
  format::Program p;
  stage(p, "train_step_pp0", 0, {send(1, 0), send(1, 1)});
  stage(p, "train_step_pp1", 1, {recv(-1, 1), recv(-1, 0)});
  Status s = checkP2POrder(p);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const std::string &m = s.message();
  EXPECT_NE(m.find("message 1 from function 'train_step_pp0' (pipeline "
                   "stage 0) to function 'train_step_pp1' (pipeline stage 1) "
                   "over axes 'pp' is tag 0 (node 'send/0'), but receive 1 "
                   "from it is tag 1 (node 'recv/1')"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("NCCL"), std::string::npos) << m;

  // The same within one function over another axis.
  format::Program q;
  stage(q, "exchange", -1,
        {Op{true, 1, 3, "tp"}, Op{true, 1, 4, "tp"}, Op{false, -1, 4, "tp"},
         Op{false, -1, 3, "tp"}});
  Status t = checkP2POrder(q);
  ASSERT_FALSE(t.isOk());
  EXPECT_NE(t.message().find("its peer at offset 1 on axes 'tp'"),
            std::string::npos)
      << t.message();
}

TEST(P2POrder, UnmatchedMessagesAreNamed) {
  {
    format::Program p;
    stage(p, "train_step_pp0", 0, {send(1, 0), send(1, 1)});
    stage(p, "train_step_pp1", 1, {recv(-1, 0)});
    Status s = checkP2POrder(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("tag 1 (node 'send/1') is never received"),
              std::string::npos)
        << s.message();
  }
  {
    format::Program p;
    stage(p, "train_step_pp0", 0, {send(1, 0)});
    stage(p, "train_step_pp1", 1, {recv(-1, 0), recv(-1, 5)});
    Status s = checkP2POrder(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("receives tag 5 (node 'recv/5')"),
              std::string::npos)
        << s.message();
  }
  {
    // A stage with no function of its family.
    format::Program p;
    stage(p, "train_step_pp0", 0, {send(2, 0)});
    stage(p, "train_step_pp1", 1, {});
    Status s = checkP2POrder(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("to pipeline stage 2"), std::string::npos)
        << s.message();
  }
  {
    // A receive nobody sends.
    format::Program p;
    stage(p, "train_step_pp0", 0, {});
    stage(p, "train_step_pp1", 1, {recv(-1, 4)});
    Status s = checkP2POrder(p);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("which sends nothing to it"), std::string::npos)
        << s.message();
  }
}

} // namespace
} // namespace dtcc::runtime
