//===- Supervisor.h - restarting a job from its last checkpoint -*- C++ -*-===//
//
// `./train --supervise [supervisor flags] [training flags]`: this process
// starts the job's ranks (all of them, or on a cluster this node's share,
// as the per-node agent of srun, mpirun or a torchrun-style launch), watches
// them, and when one fails (crashes, is killed, exits with an error such as
// a lost connection or a collective timeout, or the job makes no progress
// for --hang-timeout) stops the others and starts the whole job again, up
// to --max-restarts times with exponential back-off. The ranks resume from
// the newest valid checkpoint of --checkpoint-dir. At the end it reports
// the restarts, their causes, and the steps and time they cost. On several
// nodes the supervisors agree over TCP at MASTER_ADDR:MASTER_PORT+1 (node
// 0 coordinating): a failure on one node stops every node's ranks, and all
// restart together with node 0's attempt number.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_SUPERVISOR_H
#define DTCC_RUNTIME_EXEC_SUPERVISOR_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// Whether the command line asks for the supervisor (--supervise).
bool wantsSupervisor(int argc, char **argv);

/// The flags of the supervisor (the rest go to every rank).
struct SupervisorOptions {
  /// --ranks: ranks this supervisor starts (on this node); 0: the
  /// program's mesh divided by the nodes.
  int ranks = 0;
  /// --nnodes / --node-rank, or from the launcher (see docs/operations.md).
  int nnodes = 0, nodeRank = -1;
  int maxRestarts = 3;        ///< --max-restarts
  double backoffSeconds = 1;  ///< --restart-backoff: the first wait, doubled after each
  double maxBackoffSeconds = 60;
  double hangSeconds = 0;     ///< --hang-timeout; 0: ranks' collective timeout only
  int minRanks = 0, maxRanks = 0; ///< --min-ranks / --max-ranks
  std::string report;         ///< --supervisor-report FILE (JSON)
  std::string masterAddr;     ///< --master-addr, else MASTER_ADDR
  int masterPort = 0;         ///< --master-port, else MASTER_PORT
  /// The ranks' command line: the executable and the remaining flags.
  std::vector<std::string> rankArgs;

  /// Elastic rank counts (set by `dtcc run`, which has the compiler; not
  /// flags of a compiled program). `availableRanks`: how many ranks the
  /// job may use now, asked before every restart. `replan`: an executable
  /// compiled for that many ranks (the same model and plan choice), or an
  /// error saying why no plan fits. With both set, a one-node supervisor
  /// restarts on min(available, --max-ranks) ranks when that differs from
  /// the current count, and gives up when it is below --min-ranks.
  std::function<StatusOr<int>()> availableRanks;
  std::function<StatusOr<std::string>(int ranks)> replan;
};

/// The job as one supervisor sees it: the nodes (one supervisor each),
/// this node's ranks, and where rank 0 listens.
struct SupervisedJob {
  int nnodes = 1, nodeRank = 0, ranksPerNode = 1, worldSize = 1;
  std::string masterAddr;
  int masterPort = 0; ///< 0: a free local port per attempt (one node)
  /// Where nnodes and nodeRank came from, for messages.
  std::string launcher = "local";
};

/// The job of `options` for a program of `programRanks` ranks. Nodes come
/// from --nnodes/--node-rank, else NNODES/NODE_RANK, else srun's
/// SLURM_NNODES/SLURM_NODEID, else mpirun's OMPI_COMM_WORLD_SIZE/RANK (one
/// supervisor per node), else one node. Errors: a rank count other than the
/// program's, limits (--min-ranks, --max-ranks) that exclude it, several
/// nodes without MASTER_ADDR. `env`: std::getenv by default.
StatusOr<SupervisedJob>
supervisedJob(const SupervisorOptions &options, int programRanks,
              const std::function<const char *(const char *)> &env = {});

/// Parses the supervisor's flags out of argv; the others are the ranks'.
StatusOr<SupervisorOptions> parseSupervisorFlags(int argc, char **argv,
                                                 const std::string &self);

/// Runs the supervisor. `programRanks`: the ranks the program's mesh needs
/// (1 without a mesh). Returns the process's exit status: 0 when the job
/// finished, 1 when it failed more than --max-restarts times or could not
/// start, 128 + signal when the supervisor was stopped by one.
int runSupervisor(const SupervisorOptions &options, int programRanks);

/// What a rank reports to its supervisor (Trainer's progress callback):
/// lines "<rank> <event> <step>" on the pipe in DTCC_SUPERVISOR_FD. Null
/// when the process has no supervisor.
std::function<void(const char *event, int64_t step)>
supervisorProgress(int rank);

/// "killed by signal 9 (SIGKILL)", "exited with status 1": a wait status.
std::string describeExit(int waitStatus);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_SUPERVISOR_H
