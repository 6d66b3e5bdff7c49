//===- MeshTest.cpp - mesh communicators, splits and launchers ------------===//
//
// Axis communicators of every mesh shape the job's size allows, the
// world-size mismatch error, World::split, and launcher detection from
// fake environments.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

#include <map>

namespace dtcc::runtime::testing {
namespace {

/// The meshes a world of `n` ranks can hold, with 2 x 2 for 4 ranks.
std::vector<std::vector<int64_t>> meshShapes(int n) {
  std::vector<std::vector<int64_t>> shapes = {{n}, {1, n}, {n, 1}};
  if (n == 4)
    shapes.push_back({2, 2});
  if (n % 2 == 0 && n > 2)
    shapes.push_back({n / 2, 1, 2});
  return shapes;
}

TEST(Mesh, AxisGroupsShareTheOtherCoordinates) {
  World &w = testWorld();
  for (const auto &sizes : meshShapes(w.size())) {
    std::vector<std::string> names;
    for (size_t i = 0; i < sizes.size(); ++i)
      names.push_back("a" + std::to_string(i));
    auto mesh = createMeshComms(w, names, sizes);
    ASSERT_TRUE(mesh.isOk()) << mesh.status().toString();
    const MeshComms &m = mesh.value();
    // Row-major: the last axis fastest.
    int64_t rank = 0, stride = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      rank += m.coords()[i] * stride;
      stride *= sizes[i];
    }
    EXPECT_EQ(rank, w.rank());
    for (size_t a = 0; a < sizes.size(); ++a) {
      Communicator *c = m.axis(names[a]);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->name(), names[a]);
      EXPECT_EQ(c->size(), sizes[a]);
      EXPECT_EQ(c->rank(), m.coords()[a]);
      EXPECT_EQ(m.coord(names[a]), m.coords()[a]);
      // Group rank j is this rank with coordinate a set to j.
      int64_t axisStride = 1;
      for (size_t i = a + 1; i < sizes.size(); ++i)
        axisStride *= sizes[i];
      for (int j = 0; j < c->size(); ++j)
        EXPECT_EQ(c->worldRanks()[j],
                  w.rank() + (j - m.coords()[a]) * axisStride);
      // The sum of the world ranks of the group, through the group.
      int64_t sum = w.rank(), expected = 0;
      for (int j : c->worldRanks())
        expected += j;
      ASSERT_TRUE(
          c->allReduce(&sum, &sum, 1, DType::kI64, ReduceKind::kSum).isOk());
      EXPECT_EQ(sum, expected) << m.describe() << " axis " << names[a];
    }
    EXPECT_EQ(m.axis("nope"), nullptr);
    EXPECT_EQ(m.coord("nope"), -1);
  }
}

TEST(Mesh, TwoByTwoSubCommunicators) {
  World &w = testWorld();
  if (w.size() != 4)
    GTEST_SKIP() << "needs 4 ranks";
  auto mesh = createMeshComms(w, {"dp", "tp"}, {2, 2});
  ASSERT_TRUE(mesh.isOk());
  const MeshComms &m = mesh.value();
  EXPECT_EQ(m.describe(), "dp=2 x tp=2");
  const std::map<int, std::vector<int64_t>> coords = {
      {0, {0, 0}}, {1, {0, 1}}, {2, {1, 0}}, {3, {1, 1}}};
  EXPECT_EQ(m.coords(), coords.at(w.rank()));
  const std::vector<int> tp =
      w.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  const std::vector<int> dp =
      w.rank() % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  EXPECT_EQ(m.axis("tp")->worldRanks(), tp);
  EXPECT_EQ(m.axis("dp")->worldRanks(), dp);
  // all_gather over tp then over dp gives every rank, in mesh order.
  int32_t mine = 10 + w.rank(), pair[2], all[4];
  ASSERT_TRUE(m.axis("tp")->allGather(&mine, pair, 1, DType::kI32).isOk());
  EXPECT_EQ(pair[0], 10 + tp[0]);
  EXPECT_EQ(pair[1], 10 + tp[1]);
  ASSERT_TRUE(m.axis("dp")->allGather(pair, all, 2, DType::kI32).isOk());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(all[i], 10 + i);
}

TEST(Mesh, AxisCombinations) {
  World &w = testWorld();
  if (w.size() != 4)
    GTEST_SKIP() << "needs 4 ranks";
  auto mesh = createMeshComms(w, {"pp", "dp", "tp"}, {1, 2, 2});
  ASSERT_TRUE(mesh.isOk()) << mesh.status().toString();
  const MeshComms &m = mesh.value();
  EXPECT_EQ(m.communicators().size(), 7u);
  auto both = m.group({"dp", "tp"});
  ASSERT_TRUE(both.isOk());
  EXPECT_EQ(both.value()->name(), "dp,tp");
  EXPECT_EQ(both.value()->size(), 4);
  EXPECT_EQ(both.value()->rank(), w.rank());
  auto ppTp = m.group({"pp", "tp"});
  ASSERT_TRUE(ppTp.isOk());
  EXPECT_EQ(ppTp.value()->worldRanks(), m.axis("tp")->worldRanks());
  auto all = m.group({"pp", "dp", "tp"});
  ASSERT_TRUE(all.isOk());
  int64_t v = w.rank();
  ASSERT_TRUE(
      all.value()->allReduce(&v, &v, 1, DType::kI64, ReduceKind::kSum).isOk());
  EXPECT_EQ(v, 6);
  EXPECT_FALSE(m.group({"tp", "dp"}).isOk());
  EXPECT_FALSE(m.group({}).isOk());
  EXPECT_FALSE(m.group({"dp", "dp"}).isOk());
}

TEST(Mesh, WorldSizeMismatchIsAnImmediateError) {
  World &w = testWorld();
  const int64_t wrong = w.size() + 2;
  auto mesh = createMeshComms(w, {"dp", "tp"}, {2, wrong / 2 + 1});
  ASSERT_FALSE(mesh.isOk());
  EXPECT_EQ(mesh.status().code(), StatusCode::kInvalidArgument);
  const int64_t product = 2 * (wrong / 2 + 1);
  std::string expected =
      strCat("the program was compiled for a mesh dp=2 x tp=", wrong / 2 + 1,
             " (", product, " ranks) but the job has ", w.size(),
             w.size() == 1 ? " rank (" : " ranks (",
             launchCommand(w.launcher(), w.size()), ")");
  EXPECT_NE(mesh.status().message().find(expected), std::string::npos)
      << mesh.status().message();
  if (w.launcher() == "mpirun")
    EXPECT_NE(
        mesh.status().message().find(strCat(
            "(mpirun -np ", w.size(), "); start it with mpirun -np ", product)),
        std::string::npos)
        << mesh.status().message();
}

TEST(Mesh, BadMeshesAreErrors) {
  World &w = testWorld();
  EXPECT_FALSE(createMeshComms(w, {"dp"}, {w.size(), 1}).isOk());
  EXPECT_FALSE(createMeshComms(w, {"dp", "dp"}, {w.size(), 1}).isOk());
  EXPECT_FALSE(createMeshComms(w, {""}, {w.size()}).isOk());
  EXPECT_FALSE(createMeshComms(w, {"dp", "tp"}, {w.size(), 0}).isOk());
}

TEST(Mesh, SplitByColorAndKey) {
  World &w = testWorld();
  // Even and odd ranks, in reverse order; the last rank joins no group.
  const bool out = w.size() > 2 && w.rank() == w.size() - 1;
  auto split = w.split("parity", out ? -1 : w.rank() % 2, -w.rank());
  ASSERT_TRUE(split.isOk()) << split.status().toString();
  if (out) {
    EXPECT_EQ(split.value(), nullptr);
    return;
  }
  Communicator &c = *split.value();
  std::vector<int> members;
  for (int r = w.size() - 1; r >= 0; --r)
    if (r % 2 == w.rank() % 2 && !(w.size() > 2 && r == w.size() - 1))
      members.push_back(r);
  EXPECT_EQ(c.worldRanks(), members);
  int32_t v = w.rank();
  ASSERT_TRUE(c.allReduce(&v, &v, 1, DType::kI32, ReduceKind::kMax).isOk());
  EXPECT_EQ(v, members.front());
}

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

StatusOr<LaunchInfo> launchFrom(std::map<std::string, std::string> vars) {
  return detectLaunch([vars](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, OpenMpi) {
  auto l = launchFrom({{"OMPI_COMM_WORLD_RANK", "3"},
                       {"OMPI_COMM_WORLD_SIZE", "8"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                       {"SLURM_PROCID", "0"}, // inside an allocation
                       {"SLURM_STEP_ID", "0"}});
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  EXPECT_EQ(l.value().launcher, "mpirun");
  EXPECT_EQ(l.value().rank, 3);
  EXPECT_EQ(l.value().size, 8);
  EXPECT_EQ(l.value().localRank, 1);
  EXPECT_EQ(l.value().localSize, 4);
  // The local size is optional, but must hold the local rank.
  auto unknown = launchFrom({{"OMPI_COMM_WORLD_RANK", "0"},
                             {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_TRUE(unknown.isOk());
  EXPECT_EQ(unknown.value().localSize, 0);
  auto bad = launchFrom({{"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "2"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("OMPI_COMM_WORLD_LOCAL_SIZE=1"),
            std::string::npos)
      << bad.status().message();
}

TEST(Launch, Slurm) {
  auto l = launchFrom({{"SLURM_PROCID", "5"},
                       {"SLURM_NTASKS", "16"},
                       {"SLURM_STEP_NUM_TASKS", "6"},
                       {"SLURM_LOCALID", "2"}});
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  EXPECT_EQ(l.value().launcher, "slurm");
  EXPECT_EQ(l.value().rank, 5);
  EXPECT_EQ(l.value().size, 6);
  EXPECT_EQ(l.value().localRank, 2);
  EXPECT_EQ(l.value().localSize, 0); // no task list: unknown
  // This node's entry of the step's task list: "4(x2),3" is 4, 4, 3.
  for (auto [node, tasks] : {std::pair{"0", 4}, std::pair{"1", 4},
                             std::pair{"2", 3}, std::pair{"3", 0}}) {
    auto n = launchFrom({{"SLURM_PROCID", "5"},
                         {"SLURM_STEP_NUM_TASKS", "11"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_NODEID", node},
                         {"SLURM_STEP_TASKS_PER_NODE", "4(x2),3"}});
    ASSERT_TRUE(n.isOk()) << n.status().toString();
    EXPECT_EQ(n.value().localSize, tasks) << "node " << node;
  }
  auto odd = launchFrom({{"SLURM_PROCID", "0"},
                         {"SLURM_STEP_NUM_TASKS", "2"},
                         {"SLURM_NODEID", "0"},
                         {"SLURM_STEP_TASKS_PER_NODE", "2(y3)"}});
  ASSERT_TRUE(odd.isOk());
  EXPECT_EQ(odd.value().localSize, 0); // malformed: unknown
  // A batch script run directly (no srun step) is one process.
  auto batch = launchFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}});
  ASSERT_TRUE(batch.isOk());
  EXPECT_EQ(batch.value().launcher, "single");
  EXPECT_EQ(batch.value().size, 1);
}

TEST(Launch, Torchrun) {
  auto l = launchFrom({{"RANK", "2"},
                       {"WORLD_SIZE", "3"},
                       {"LOCAL_RANK", "0"},
                       {"MASTER_ADDR", "10.0.0.1"},
                       {"MASTER_PORT", "29500"},
                       {"SLURM_PROCID", "1"},
                       {"SLURM_STEP_ID", "0"}});
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  EXPECT_EQ(l.value().launcher, "torchrun");
  EXPECT_EQ(l.value().rank, 2);
  EXPECT_EQ(l.value().size, 3);
  EXPECT_EQ(l.value().masterAddr, "10.0.0.1");
  EXPECT_EQ(l.value().masterPort, 29500);
  EXPECT_EQ(l.value().localSize, 0);
  auto local = launchFrom({{"RANK", "2"},
                           {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "0"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "10.0.0.1"},
                           {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(local.isOk()) << local.status().toString();
  EXPECT_EQ(local.value().localSize, 2);
}

TEST(Launch, SingleAndErrors) {
  auto l = launchFrom({});
  ASSERT_TRUE(l.isOk());
  EXPECT_EQ(l.value().launcher, "single");
  EXPECT_EQ(l.value().size, 1);

  auto noAddr = launchFrom({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(noAddr.isOk());
  EXPECT_NE(noAddr.status().message().find("MASTER_ADDR"), std::string::npos);
  auto badPort = launchFrom({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "x"},
                             {"MASTER_PORT", "99999"}});
  EXPECT_FALSE(badPort.isOk());
  auto badRank = launchFrom(
      {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  ASSERT_FALSE(badRank.isOk());
  EXPECT_NE(badRank.status().message().find("OMPI_COMM_WORLD_RANK=4"),
            std::string::npos)
      << badRank.status().message();
  EXPECT_FALSE(
      launchFrom({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}})
          .isOk());
}

TEST(Launch, Commands) {
  EXPECT_EQ(launchCommand("mpirun", 3), "mpirun -np 3");
  EXPECT_EQ(launchCommand("slurm", 3), "srun -n 3");
  EXPECT_EQ(launchCommand("torchrun", 3), "torchrun, WORLD_SIZE=3");
}

} // namespace
} // namespace dtcc::runtime::testing
