//===- CommProcessTest.cpp - jobs started by the test ---------------------===//
//
// Starts DtccCommWorker as the ranks of a job: torchrun-style (fork/exec
// with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT; the TCP
// backend) and under mpirun, and checks exit codes and messages: exact
// collectives, the collective timeout, a peer that dies, a mesh that does
// not fit the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/base/Status.h"
#include "runtime/comm/TcpPort.h"
#include "runtime/format/Container.h"
#include "runtime/io/TensorFile.h"
#include "tests/unit/trainer/TrainerTestUtils.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace dtcc::runtime {
namespace {

struct Proc {
  int exitCode = -1;  ///< -1: killed by the test or a signal
  std::string output; ///< stdout and stderr together
  double seconds = 0; ///< from the start of the job to its exit
};

/// Runs one process per entry of `envs` (argv `args`, that environment),
/// output to a file each; kills what still runs after `limitSeconds`.
std::vector<Proc> runAll(const std::vector<std::string> &args,
                         const std::vector<std::vector<std::string>> &envs,
                         double limitSeconds) {
  std::vector<pid_t> pids;
  std::vector<std::string> files;
  for (size_t i = 0; i < envs.size(); ++i) {
    char path[] = "/tmp/dtcc-comm-proc-XXXXXX";
    int fd = mkstemp(path);
    files.push_back(path);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char *> argv, envp;
      for (const std::string &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      for (const std::string &e : envs[i])
        envp.push_back(const_cast<char *>(e.c_str()));
      envp.push_back(nullptr);
      execve(args[0].c_str(), argv.data(), envp.data());
      std::perror("execve");
      _exit(127);
    }
    close(fd);
    pids.push_back(pid);
  }
  std::vector<Proc> procs(pids.size());
  std::vector<bool> done(pids.size(), false);
  const auto start = std::chrono::steady_clock::now();
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(int64_t(limitSeconds * 1000));
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i])
        continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --remaining;
        procs[i].exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        procs[i].seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          done[i] = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::ifstream in(files[i]);
    std::stringstream ss;
    ss << in.rdbuf();
    procs[i].output = ss.str();
    std::remove(files[i].c_str());
  }
  return procs;
}

/// The variables every child gets: PATH, HOME, and what mpirun needs in a
/// container (root allowed, more ranks than cores, no shared memory).
std::vector<std::string> baseEnv() {
  std::vector<std::string> env = {
      "OPENBLAS_NUM_THREADS=1", "OMPI_ALLOW_RUN_AS_ROOT=1",
      "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl=self,tcp",
      "OMPI_MCA_rmaps_base_oversubscribe=1"};
  for (char **e = environ; *e; ++e) {
    std::string v = *e;
    if (v.rfind("PATH=", 0) == 0 || v.rfind("HOME=", 0) == 0 ||
        v.rfind("TMPDIR=", 0) == 0)
      env.push_back(v);
  }
  return env;
}

/// The ranks of a torchrun-style job of `size` with MASTER_PORT=`port`.
std::vector<Proc> runTcpJobOnPort(int port, int size,
                                  const std::string &scenario,
                                  double timeoutSeconds, double limitSeconds) {
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> env = baseEnv();
    env.push_back(strCat("RANK=", r));
    env.push_back(strCat("LOCAL_RANK=", r));
    env.push_back(strCat("WORLD_SIZE=", size));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back(strCat("MASTER_PORT=", port));
    env.push_back(strCat("DTCC_COLLECTIVE_TIMEOUT=", timeoutSeconds));
    envs.push_back(env);
  }
  return runAll({DTCC_COMM_WORKER, scenario}, envs, limitSeconds);
}

/// The ranks of a torchrun-style job of `size`, on a port found free; again
/// on another one when someone took it in between (rank 0 cannot listen).
std::vector<Proc> runTcpJob(int size, const std::string &scenario,
                            double timeoutSeconds, double limitSeconds) {
  std::vector<Proc> procs;
  for (int attempt = 0; attempt < 3; ++attempt) {
    procs = runTcpJobOnPort(pickFreeTcpPort(), size, scenario, timeoutSeconds,
                            limitSeconds);
    if (procs[0].output.find("cannot listen on MASTER_PORT") ==
        std::string::npos)
      break;
  }
  return procs;
}

std::string describe(const std::vector<Proc> &procs) {
  std::string s;
  for (size_t i = 0; i < procs.size(); ++i)
    s += strCat("--- process ", i, " exited ", procs[i].exitCode, ":\n",
                procs[i].output);
  return s;
}

/// Every process exited 0 and printed "rank R: <what>".
void expectEveryRank(const std::vector<Proc> &procs, const std::string &what) {
  for (size_t r = 0; r < procs.size(); ++r) {
    EXPECT_EQ(procs[r].exitCode, 0) << describe(procs);
    EXPECT_NE(procs[r].output.find(strCat("rank ", r, ": ", what)),
              std::string::npos)
        << describe(procs);
  }
}

TEST(TcpBackend, CollectivesOnTwoAndFourRanks) {
  for (int size : {2, 4}) {
    auto procs = runTcpJob(size, "collectives", 20, 30);
    expectEveryRank(procs, "ok");
  }
}

// What the transports count is what the calls moved: the TCP backend's
// socket writes (ring payload plus a 32-byte header per message), MPI's
// send buffers, and the ring formula with f16 reductions at f32 size.
TEST(TcpBackend, TrafficIsCountedAtTheSockets) {
  for (int size : {2, 4}) {
    auto procs = runTcpJob(size, "traffic", 20, 30);
    expectEveryRank(procs, "ok traffic");
  }
}

TEST(MpiBackend, TrafficIsCountedAtTheCalls) {
  auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "-np", "4",
                       DTCC_COMM_WORKER, "traffic"},
                      {baseEnv()}, 60);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(procs[0].output.find(strCat("rank ", r, ": ok traffic")),
              std::string::npos)
        << describe(procs);
  EXPECT_EQ(procs[0].exitCode, 0) << describe(procs);
}

TEST(TcpBackend, TimeoutEndsTheWaitingRanks) {
  auto procs = runTcpJob(2, "timeout", 1, 20);
  EXPECT_NE(procs[0].exitCode, 0) << describe(procs);
  EXPECT_NE(procs[0].output.find(
                "dtcc: rank 0: collective all_reduce over axis dp (node "
                "\"/h.0/mlp/fc1/MatMul\", 4096 bytes) timed out after 1 s"),
            std::string::npos)
      << describe(procs);
  // The skipping rank sleeps 6 s; rank 0 must not have waited for it.
  EXPECT_EQ(procs[1].exitCode, 0) << describe(procs);
  EXPECT_LT(procs[0].seconds, 5) << describe(procs);
}

TEST(TcpBackend, PeerThatDiesIsAnErrorNamingTheCollective) {
  auto procs = runTcpJob(2, "peer-dies", 20, 20);
  EXPECT_EQ(procs[1].exitCode, 7) << describe(procs);
  EXPECT_EQ(procs[0].exitCode, 1) << describe(procs);
  // kPeerLost, which tells a supervisor that the cause is elsewhere.
  EXPECT_NE(procs[0].output.find(
                "peer lost: rank 0: all_reduce over axis dp (node "
                "\"/h.0/mlp/fc1/MatMul\", 4096 bytes): rank 1 closed its "
                "connection"),
            std::string::npos)
      << describe(procs);
}

TEST(TcpBackend, MeshThatDoesNotFitTheJob) {
  auto procs = runTcpJob(3, "mismatch", 20, 20);
  for (const Proc &p : procs) {
    EXPECT_EQ(p.exitCode, 1) << describe(procs);
    EXPECT_NE(p.output.find("the program was compiled for a mesh dp=2 x tp=2 "
                            "(4 ranks) but the job has 3 ranks"),
              std::string::npos)
        << describe(procs);
  }
}

TEST(TcpBackend, SendsDoNotWaitForTheirReceiver) {
  // Each rank sends 256 KiB and 8 MiB before receiving its peer's: more
  // than loopback's socket buffers take, so a send that held the
  // communication thread until the peer read it would deadlock (and the
  // watchdog end the job after 10 s).
  for (int size : {2, 4}) {
    auto procs = runTcpJob(size, "exchange", 10, 40);
    expectEveryRank(procs, "ok, exchanged");
  }
}

TEST(TcpBackend, SendNeverReceivedEndsTheJob) {
  // A send in flight is watched like a running collective: rank 1 never
  // receives rank 0's 8 MiB, so rank 0's watchdog ends it after 1 s, naming
  // the send, its node and its peer.
  auto procs = runTcpJob(2, "unreceived", 1, 20);
  EXPECT_EQ(procs[0].exitCode, 124) << describe(procs);
  EXPECT_NE(procs[0].output.find(
                "dtcc: rank 0: collective send(to 1, tag 3) over axis dp "
                "(node \"/h.0/mlp/fc1/MatMul\", 8388608 bytes) timed out "
                "after 1 s\ndtcc: rank 0: its peer never received it"),
            std::string::npos)
      << describe(procs);
  EXPECT_LT(procs[0].seconds, 5) << describe(procs);
}

TEST(MpiBackend, TimeoutEndsTheJob) {
  std::vector<std::string> env = baseEnv();
  env.push_back("DTCC_COLLECTIVE_TIMEOUT=1");
  auto start = std::chrono::steady_clock::now();
  auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl",
                       "self,tcp", "-np", "2", DTCC_COMM_WORKER, "timeout"},
                      {env}, 30);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_NE(procs[0].exitCode, 0) << describe(procs);
  EXPECT_NE(procs[0].output.find(
                "dtcc: rank 0: collective all_reduce over axis dp (node "
                "\"/h.0/mlp/fc1/MatMul\", 4096 bytes) timed out after 1 s"),
            std::string::npos)
      << describe(procs);
  // MPI_Abort ends the sleeping rank too.
  EXPECT_EQ(procs[0].output.find("skipped the all_reduce"), std::string::npos)
      << describe(procs);
  EXPECT_LT(took, 12);
}

TEST(MpiBackend, SendsDoNotWaitForTheirReceiver) {
  // As over TCP: above Open MPI's eager limit (64 KiB over TCP) a blocking
  // MPI_Send waits for the matching receive, which the peer posts only
  // after its own send.
  std::vector<std::string> env = baseEnv();
  env.push_back("DTCC_COLLECTIVE_TIMEOUT=10");
  for (const char *np : {"2", "4"}) {
    auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl",
                         "self,tcp", "-np", np, DTCC_COMM_WORKER, "exchange"},
                        {env}, 40);
    EXPECT_EQ(procs[0].exitCode, 0) << describe(procs);
    for (int r = 0; r < std::atoi(np); ++r)
      EXPECT_NE(procs[0].output.find(strCat("rank ", r, ": ok, exchanged")),
                std::string::npos)
          << describe(procs);
  }
}

TEST(MpiBackend, SendNeverReceivedEndsTheJob) {
  std::vector<std::string> env = baseEnv();
  env.push_back("DTCC_COLLECTIVE_TIMEOUT=1");
  auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl",
                       "self,tcp", "-np", "2", DTCC_COMM_WORKER, "unreceived"},
                      {env}, 30);
  EXPECT_NE(procs[0].exitCode, 0) << describe(procs);
  EXPECT_NE(procs[0].output.find(
                "dtcc: rank 0: collective send(to 1, tag 3) over axis dp "
                "(node \"/h.0/mlp/fc1/MatMul\", 8388608 bytes) timed out "
                "after 1 s\ndtcc: rank 0: its peer never received it"),
            std::string::npos)
      << describe(procs);
  // MPI_Abort ends the sleeping rank too.
  EXPECT_EQ(procs[0].output.find("never received\n"), std::string::npos)
      << describe(procs);
  EXPECT_LT(procs[0].seconds, 12) << describe(procs);
}

TEST(MpiBackend, MeshThatDoesNotFitTheJob) {
  auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl",
                       "self,tcp", "-np", "3", DTCC_COMM_WORKER, "mismatch"},
                      {baseEnv()}, 30);
  EXPECT_NE(procs[0].exitCode, 0) << describe(procs);
  EXPECT_NE(procs[0].output.find("the program was compiled for a mesh dp=2 x "
                                 "tp=2 (4 ranks) but the job has 3 ranks "
                                 "(mpirun -np 3); start it with mpirun -np 4"),
            std::string::npos)
      << describe(procs);
}

//===----------------------------------------------------------------------===//
// The runner on a mesh program
//===----------------------------------------------------------------------===//

/// A program for the mesh dp=2: y = all_reduce(x) (blocking), g =
/// all_gather(x) along dim 1 (async, waited after the all_reduce), and
/// i = axis_index(dp).
format::Program meshProgram() {
  format::Program p;
  p.set_format_version(kProgramFormatVersion);
  p.mutable_mesh()->add_axes("dp");
  p.mutable_mesh()->add_sizes(2);
  auto buffer = [&](DType dtype, std::vector<int64_t> shape, int64_t offset) {
    auto *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(static_cast<int32_t>(dtype));
    for (int64_t d : shape)
      b->add_shape(d);
    b->set_arena(format::ARENA_WORKSPACE);
    b->set_offset(offset);
    return b->id();
  };
  int x = buffer(DType::kF32, {2, 2}, 0);
  int y = buffer(DType::kF32, {2, 2}, 64);
  int g = buffer(DType::kF32, {2, 4}, 128);
  int i = buffer(DType::kI64, {}, 192);
  p.set_workspace_bytes(256);
  auto *fn = p.add_functions();
  fn->set_name("main");
  auto io = [](google::protobuf::RepeatedPtrField<format::Binding> *list,
               const char *name, int id) {
    auto *b = list->Add();
    b->set_name(name);
    b->set_buffer(id);
  };
  io(fn->mutable_inputs(), "x", x);
  io(fn->mutable_outputs(), "y", y);
  io(fn->mutable_outputs(), "g", g);
  io(fn->mutable_outputs(), "i", i);
  auto inst = [&](const char *kernel, std::vector<int> in, std::vector<int> out,
                  const char *loc) {
    auto *ins = fn->add_instructions();
    ins->set_kernel(kernel);
    for (int id : in)
      ins->add_inputs(id);
    for (int id : out)
      ins->add_outputs(id);
    ins->set_location(loc);
    (*ins->mutable_attrs())["axes"].mutable_strings()->add_values("dp");
    return ins;
  };
  auto *gather = inst("all_gather", {x}, {g}, "/gather");
  (*gather->mutable_attrs())["dim"].set_i(1);
  (*gather->mutable_attrs())["async"].set_i(1);
  (*gather->mutable_attrs())["handle"].set_i(1);
  inst("all_reduce", {x}, {y}, "/reduce");
  auto *wait = fn->add_instructions();
  wait->set_kernel("wait");
  wait->set_location("/wait");
  (*wait->mutable_attrs())["handle"].set_i(1);
  inst("axis_index", {}, {i}, "/index");
  return p;
}

TEST(Runner, MeshProgramUnderMpirun) {
  char dir[] = "/tmp/dtcc-comm-runner-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string program = std::string(dir) + "/mesh.dtcc";
  const std::string input = std::string(dir) + "/x.pb";
  ASSERT_TRUE(writeContainer(program, "", meshProgram(), "").isOk());
  HostTensor x(DType::kF32, {2, 2});
  for (int k = 0; k < 4; ++k)
    x.data<float>()[k] = float(k + 1);
  ASSERT_TRUE(writeTensorFile(input, "x", x).isOk());

  auto procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl",
                       "self,tcp", "-np", "2", DTCC_RUNNER, "--program",
                       program, "--input", "x=" + input, "--print"},
                      {baseEnv()}, 30);
  const std::string &out = procs[0].output;
  EXPECT_EQ(procs[0].exitCode, 0) << describe(procs);
  // Rank 0 alone prints the outputs: every rank had x = 1..4. (Lines are
  // checked one by one: mpirun may put rank 1's line between any two.)
  for (const char *line :
       {"y: tensor<2x2xf32>\n", "  [2, 4, 6, 8]\n", "g: tensor<2x4xf32>\n",
        "  [1, 2, 1, 2, 3, 4, 3, 4]\n", "i: tensor<i64>\n", "  [0]\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << " in\n" << out;
  EXPECT_EQ(out.find("y: "), out.rfind("y: ")) << out;
  // Every rank's closing line: 16 bytes of all_reduce, 16 of all_gather.
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(out.find(strCat("rank ", r, ": peak memory 256 B planned")),
              std::string::npos)
        << out;
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(out.find(strCat("bytes sent 32 B (predicted ")), std::string::npos)
        << out;

  // Three ranks for a mesh of two: one clear error, from rank 0.
  procs = runAll({DTCC_MPIEXEC, "--oversubscribe", "--mca", "btl", "self,tcp",
                  "-np", "3", DTCC_RUNNER, "--program", program, "--input",
                  "x=" + input},
                 {baseEnv()}, 30);
  EXPECT_NE(procs[0].exitCode, 0) << describe(procs);
  const std::string message = "error: the program was compiled for a mesh "
                              "dp=2 (2 ranks) but the job has 3 ranks "
                              "(mpirun -np 3); start it with mpirun -np 2";
  EXPECT_NE(procs[0].output.find(message), std::string::npos)
      << describe(procs);
  EXPECT_EQ(procs[0].output.find(message), procs[0].output.rfind(message))
      << describe(procs);
  std::remove(program.c_str());
  std::remove(input.c_str());
  rmdir(dir);
}

/// The losses of "step  k/N  loss X" lines, by step.
std::map<int, double> losses(const std::string &log) {
  std::map<int, double> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    int step = 0, total = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "step %d/%d loss %lf", &step, &total,
                    &loss) == 3)
      out[step] = loss;
  }
  return out;
}

TEST(Runner, TrainingOnAMeshLogsFromRankZero) {
  using namespace dtcc::runtime::testing;
  char dir[] = "/tmp/dtcc-comm-train-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::vector<uint32_t> tokens;
  for (int i = 0; i < 3000; ++i)
    tokens.push_back((i * 7 + i / 13) % 50);
  writeTokens(d + "/tokens.bin", tokens, 2);

  // The single-device program, and the same with its loss summed over a
  // dp=2 mesh (both ranks draw the same batches: twice the loss).
  ProgramBuilder b = singleMicroBatchProgram(2);
  format::Program single = b.program();
  format::Program mesh = single;
  mesh.mutable_mesh()->add_axes("dp");
  mesh.mutable_mesh()->add_sizes(2);
  for (format::Function &fn : *mesh.mutable_functions()) {
    if (fn.name() != "train_step")
      continue;
    int loss = -1;
    for (const format::Binding &o : fn.outputs())
      if (o.name() == "loss")
        loss = o.buffer();
    auto *ar = fn.add_instructions();
    ar->set_kernel("all_reduce");
    ar->add_inputs(loss);
    ar->add_outputs(loss);
    ar->set_location("/loss/AllReduce");
    (*ar->mutable_attrs())["axes"].mutable_strings()->add_values("dp");
  }
  ASSERT_TRUE(writeContainer(d + "/single.dtcc", "", single, b.data()).isOk());
  ASSERT_TRUE(writeContainer(d + "/mesh.dtcc", "", mesh, b.data()).isOk());
  const std::vector<std::string> flags = {
      "--data", d + "/tokens.bin",      "--steps", "3", "--log-every",
      "1",      "--collective-timeout", "20"};

  std::vector<std::string> args = {DTCC_RUNNER, "--program",
                                   d + "/single.dtcc"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto ref = runAll(args, {baseEnv()}, 30);
  ASSERT_EQ(ref[0].exitCode, 0) << describe(ref);
  EXPECT_EQ(ref[0].output.find("bytes sent"), std::string::npos)
      << "single-device output changed:\n"
      << ref[0].output;

  args = {DTCC_MPIEXEC, "--oversubscribe",
          "--mca",      "btl",
          "self,tcp",   "-np",
          "2",          DTCC_RUNNER,
          "--program",  d + "/mesh.dtcc"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto job = runAll(args, {baseEnv()}, 30);
  const std::string &out = job[0].output;
  ASSERT_EQ(job[0].exitCode, 0) << describe(job);
  auto want = losses(ref[0].output), got = losses(out);
  ASSERT_EQ(want.size(), 3u) << ref[0].output;
  ASSERT_EQ(got.size(), 3u) << out;
  for (const auto &[step, loss] : want)
    EXPECT_NEAR(got[step], 2 * loss, 1e-4 * std::abs(loss) + 1e-4)
        << "step " << step << "\n"
        << out;
  // One log line per step (rank 0's), one closing line per rank.
  ASSERT_NE(out.find("step 1/3"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 1/3"), out.rfind("step 1/3")) << out;
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(out.find(strCat("rank ", r, ": peak memory ")), std::string::npos)
        << out;
  EXPECT_NE(out.find(", bytes sent 12 B"), std::string::npos) << out;
  std::filesystem::remove_all(d);
}

} // namespace
} // namespace dtcc::runtime
