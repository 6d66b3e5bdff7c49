//===- TcpPort.h - choosing rank 0's port on this host ----------*- C++ -*-===//
//
// Plain POSIX sockets, no MPI: used by the supervisor (dtcc run, --supervise)
// and by tests that launch torchrun-style ranks on one machine.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_COMM_TCPPORT_H
#define DTCC_RUNTIME_COMM_TCPPORT_H

namespace dtcc::runtime {

/// A TCP port that nothing on this host is bound to now, for rank 0 of a
/// single-node launch: chosen at random below the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range), where connections' own ports never
/// land. A port the kernel hands out for port 0 is one of the ephemeral
/// ones, which the ranks' own connections (or another job's) can take
/// between this choice and rank 0's listen ("Address already in use").
/// Falls back to the kernel's choice when no port of that range is free.
int pickFreeTcpPort();

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_COMM_TCPPORT_H
