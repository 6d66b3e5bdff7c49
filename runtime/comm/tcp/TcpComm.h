//===- TcpComm.h - the TCP backend for torchrun-style launches --*- C++ -*-===//
//
// Without an MPI job: rank 0 listens at MASTER_ADDR:MASTER_PORT, every rank
// connects and learns the others' addresses, the ranks connect pairwise, and
// collectives run as rings over the sockets.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_TCP_TCPCOMM_H
#define DTCC_RUNTIME_COMM_TCP_TCPCOMM_H

#include "runtime/comm/Communicator.h"

namespace dtcc::runtime {

/// Connects the `launch.size` ranks of a torchrun-style launch (every rank
/// to every other), giving up after `connectTimeoutSeconds` with an error
/// naming the ranks that did not appear. Operations of all communicators
/// of the world are serialized by one lock; a peer that exits is an error
/// ("rank 3 closed its connection") rather than a hang.
StatusOr<std::unique_ptr<World>> createTcpWorld(const LaunchInfo &launch,
                                                double connectTimeoutSeconds);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_TCP_TCPCOMM_H
