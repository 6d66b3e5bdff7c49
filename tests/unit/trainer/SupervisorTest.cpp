//===- SupervisorTest.cpp - the supervisor's flags and job shape ----------===//
//
// Which flags the supervisor keeps and which go to the ranks, the job it
// derives from each launcher's variables, its errors, and how it names a
// rank's end. Restarts themselves are tested end to end in tests/fault.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Supervisor.h"

#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <sys/wait.h>
#include <unistd.h>

using namespace dtcc::runtime;

namespace {

StatusOr<SupervisorOptions> parse(std::vector<std::string> args) {
  std::vector<char *> argv;
  static std::string self = "./train";
  argv.push_back(self.data());
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseSupervisorFlags(static_cast<int>(argv.size()), argv.data(),
                              "/bin/train");
}

using Env = std::map<std::string, std::string>;
StatusOr<SupervisedJob> job(const SupervisorOptions &o, int ranks, Env env) {
  return supervisedJob(o, ranks, [env](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(SupervisorTest, KeepsItsFlagsAndPassesTheRestToTheRanks) {
  auto o = parse({"--supervise", "--data", "t.bin", "--ranks=4",
                  "--max-restarts", "7", "--steps", "10", "--hang-timeout",
                  "2.5", "--restart-backoff", "0", "--checkpoint-dir", "c",
                  "--supervisor-report", "r.json", "--master-port", "29400"});
  ASSERT_TRUE(o.isOk()) << o.status().toString();
  EXPECT_EQ(o.value().ranks, 4);
  EXPECT_EQ(o.value().maxRestarts, 7);
  EXPECT_EQ(o.value().hangSeconds, 2.5);
  EXPECT_EQ(o.value().backoffSeconds, 0);
  EXPECT_EQ(o.value().report, "r.json");
  EXPECT_EQ(o.value().masterPort, 29400);
  EXPECT_EQ(o.value().rankArgs,
            (std::vector<std::string>{"/bin/train", "--data", "t.bin",
                                      "--steps", "10", "--checkpoint-dir",
                                      "c"}));

  EXPECT_EQ(parse({"--supervise", "--ranks", "0"}).status().message(),
            "--ranks expects an integer >= 1, got '0'");
  EXPECT_EQ(parse({"--supervise", "--hang-timeout", "-1"}).status().message(),
            "--hang-timeout expects a number of seconds, got '-1'");
  EXPECT_EQ(parse({"--supervise", "--max-restarts"}).status().message(),
            "--max-restarts needs a value");
  EXPECT_EQ(parse({"--supervise", "--master-port", "70000"}).status().message(),
            "--master-port expects a port number, got '70000'");
}

TEST(SupervisorTest, ReadsTheNodesFromEachLauncher) {
  SupervisorOptions o;
  // One node: all the program's ranks, rank 0 on this host.
  auto local = job(o, 4, {});
  ASSERT_TRUE(local.isOk()) << local.status().toString();
  EXPECT_EQ(local.value().nnodes, 1);
  EXPECT_EQ(local.value().ranksPerNode, 4);
  EXPECT_EQ(local.value().masterAddr, "127.0.0.1");
  EXPECT_EQ(local.value().masterPort, 0);

  // srun, one supervisor per node.
  auto slurm = job(o, 8, {{"SLURM_NNODES", "4"}, {"SLURM_NODEID", "2"},
                          {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"},
                          {"MASTER_ADDR", "n1"}});
  ASSERT_TRUE(slurm.isOk()) << slurm.status().toString();
  EXPECT_EQ(slurm.value().nnodes, 4);
  EXPECT_EQ(slurm.value().nodeRank, 2);
  EXPECT_EQ(slurm.value().ranksPerNode, 2);
  EXPECT_EQ(slurm.value().worldSize, 8);
  EXPECT_EQ(slurm.value().masterAddr, "n1");
  EXPECT_EQ(slurm.value().masterPort, 29500);

  // mpirun --map-by ppr:1:node.
  auto mpi = job(o, 4, {{"OMPI_COMM_WORLD_SIZE", "2"},
                        {"OMPI_COMM_WORLD_RANK", "1"},
                        {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(mpi.isOk()) << mpi.status().toString();
  EXPECT_EQ(mpi.value().nodeRank, 1);
  EXPECT_EQ(mpi.value().ranksPerNode, 2);
  EXPECT_EQ(mpi.value().masterPort, 1234);

  // torchrun-style agents; flags win over variables.
  Env agents = {{"NNODES", "2"}, {"NODE_RANK", "1"}, {"MASTER_ADDR", "h0"}};
  auto t = job(o, 2, agents);
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t.value().nodeRank, 1);
  o.nnodes = 2;
  o.nodeRank = 0;
  o.masterAddr = "h9";
  auto flags = job(o, 2, agents);
  ASSERT_TRUE(flags.isOk());
  EXPECT_EQ(flags.value().nodeRank, 0);
  EXPECT_EQ(flags.value().masterAddr, "h9");
}

TEST(SupervisorTest, RefusesJobsThatCannotRunTheProgram) {
  SupervisorOptions o;
  o.ranks = 3;
  EXPECT_EQ(job(o, 2, {}).status().message(),
            "the program was compiled for 2 ranks but 1 node(s) x --ranks 3 "
            "make 3 (recompile with dtcc compile for that many ranks, or "
            "change --ranks)");
  o.ranks = 0;
  EXPECT_EQ(job(o, 6, {{"NNODES", "4"}, {"NODE_RANK", "0"}, {"MASTER_ADDR", "a"}})
                .status()
                .message(),
            "the program's mesh has 6 ranks, which 4 nodes cannot share "
            "equally; pass --ranks");
  EXPECT_NE(job(o, 4, {{"NNODES", "2"}, {"NODE_RANK", "0"}})
                .status()
                .message()
                .find("needs rank 0's address: set MASTER_ADDR"),
            std::string::npos);
  EXPECT_EQ(job(o, 2, {{"NNODES", "2"}, {"NODE_RANK", "2"}}).status().message(),
            "node rank 2 is not below the 2 nodes");
  // Under a launcher that starts the ranks itself, or several per node.
  EXPECT_NE(job(o, 2, {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                       {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .status()
                .message()
                .find("torchrun (or a launcher like it) started as rank 1 of 2"),
            std::string::npos);
  EXPECT_EQ(job(o, 8, {{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"},
                       {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"},
                       {"MASTER_ADDR", "a"}})
                .status()
                .message(),
            "--supervise under srun with SLURM_STEP_NUM_TASKS=8 on 2 node(s): "
            "run one supervisor per node (srun --ntasks-per-node=1); it starts "
            "that node's ranks");
  o.minRanks = 8;
  EXPECT_EQ(job(o, 4, {}).status().message(),
            "--min-ranks 8 excludes the program's 4 ranks");
  o.minRanks = 0;
  o.maxRanks = 2;
  EXPECT_EQ(job(o, 4, {}).status().message(),
            "--max-ranks 2 excludes the program's 4 ranks");
  o.maxRanks = 16; // allowed: restarts keep the compiled count
  EXPECT_TRUE(job(o, 4, {}).isOk());
}

TEST(SupervisorTest, NamesHowARankEnded) {
  auto statusOf = [](auto &&body) {
    pid_t pid = fork();
    if (pid == 0) {
      body();
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  EXPECT_EQ(describeExit(statusOf([] { _exit(3); })), "exited with status 3");
  EXPECT_EQ(describeExit(statusOf([] { _exit(124); })),
            "exited with status 124 (a collective timed out)");
  EXPECT_EQ(describeExit(statusOf([] { _exit(75); })),
            "exited with status 75 (it lost a peer)");
  EXPECT_EQ(describeExit(statusOf([] { raise(SIGKILL); })),
            "killed by signal 9 (SIGKILL)");
}

TEST(SupervisorTest, ReportsProgressOnlyUnderASupervisor) {
  unsetenv("DTCC_SUPERVISOR_FD");
  EXPECT_FALSE(supervisorProgress(0));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  setenv("DTCC_SUPERVISOR_FD", std::to_string(fds[1]).c_str(), 1);
  auto progress = supervisorProgress(3);
  ASSERT_TRUE(progress);
  progress("step", 42);
  progress("saved", 40);
  char buf[64] = {};
  ASSERT_GT(read(fds[0], buf, sizeof(buf) - 1), 0);
  EXPECT_EQ(std::string(buf), "3 step 42\n3 saved 40\n");
  unsetenv("DTCC_SUPERVISOR_FD");
  close(fds[0]);
  close(fds[1]);
}

} // namespace
