//===- P2POrder.h - sends and receives meet in order ------------*- C++ -*-===//
//
// The CPU backend matches a receive to a send by tag; NCCL matches the
// messages between two ranks in the order they are posted and ignores
// tags. The two agree exactly when every function receives from each peer
// in the order that peer sends, so a program is checked for that when it
// is loaded, on either backend, and refused otherwise (the compiler orders
// the receives of pipeline stages so: passes/Sharding/Pipeline.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_P2PORDER_H
#define DTCC_RUNTIME_EXEC_P2PORDER_H

#include "runtime/base/Status.h"
#include "runtime/format/Program.pb.h"

namespace dtcc::runtime {

/// Checks every pair of functions that exchange send/recv: a function of
/// pipeline stage s (Function.stage) sends over axis "pp" with offset o to
/// the function of stage s + o of its family (the same name but for the
/// "_pp<stage>" suffix); over any other axis, or without a stage, to
/// itself on the peer. For each such pair and direction, the tags received
/// must be the tags sent, in the same order. The error names both
/// functions, the first message that differs and the ONNX nodes of both
/// sides.
Status checkP2POrder(const format::Program &program);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_P2PORDER_H
