//===- Status.cpp ---------------------------------------------------------===//

#include "runtime/base/Status.h"

namespace dtcc::runtime {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::kOk:
    return "ok";
  case StatusCode::kInvalidArgument:
    return "invalid argument";
  case StatusCode::kNotFound:
    return "not found";
  case StatusCode::kOutOfRange:
    return "out of range";
  case StatusCode::kUnimplemented:
    return "unimplemented";
  case StatusCode::kDeadlineExceeded:
    return "deadline exceeded";
  case StatusCode::kUnavailable:
    return "unavailable";
  case StatusCode::kPeerLost:
    return "peer lost";
  case StatusCode::kDataLoss:
    return "data loss";
  case StatusCode::kInternal:
    return "internal error";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk())
    return "ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

} // namespace dtcc::runtime
