//===- MpiComm.h - the MPI backend ------------------------------*- C++ -*-===//
//
// Worlds started by mpirun or srun: MPI_Init_thread, one MPI_Comm_split per
// group, MPI collectives.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_MPI_MPICOMM_H
#define DTCC_RUNTIME_COMM_MPI_MPICOMM_H

#include "runtime/comm/Communicator.h"

namespace dtcc::runtime {

/// Initializes MPI (unless the process already did) with
/// MPI_THREAD_MULTIPLE: collectives run on the communication thread while
/// the watchdog may call MPI_Abort from another. Falls back to
/// MPI_THREAD_SERIALIZED (the watchdog then uses _exit); anything less is an
/// error. Checks that MPI's world agrees with `launch`.
StatusOr<std::unique_ptr<World>> createMpiWorld(const LaunchInfo &launch);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_MPI_MPICOMM_H
