//===- Status.h - error values for the runtime ------------------*- C++ -*-===//
//
// The runtime reports errors as values (no exceptions, no exit inside the
// library): Status for operations without a result, StatusOr<T> otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_STATUS_H
#define DTCC_RUNTIME_BASE_STATUS_H

#include <cassert>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace dtcc::runtime {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  ///< bad input from the user: a file, a shape, a flag
  kNotFound,         ///< a named thing (file, input, kernel) does not exist
  kOutOfRange,       ///< an index outside its tensor
  kUnimplemented,    ///< a kernel or dtype this backend lacks
  kDeadlineExceeded, ///< a collective that timed out
  kUnavailable,      ///< a device, file or service that is not there
  kPeerLost,         ///< another rank of the job exited or crashed
  kDataLoss,         ///< a truncated or corrupt file
  kInternal,         ///< a bug in dtcc
};

const char *statusCodeName(StatusCode code);

/// The result of an operation: ok, or a code with a message for the user.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }
  /// "invalid argument: <message>".
  std::string toString() const;

  /// Prepends context: `status.withContext("loading program")`.
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return Status(code_, context + ": " + message_);
  }

private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value or the error that prevented it.
template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {
    assert(!status_.isOk() && "StatusOr needs an error or a value");
  }
  bool isOk() const { return status_.isOk(); }
  const Status &status() const { return status_; }
  T &value() & { return *value_; }
  const T &value() const & { return *value_; }
  T &&value() && { return std::move(*value_); }
  T *operator->() { return &*value_; }
  T &operator*() { return *value_; }

private:
  Status status_;
  std::optional<T> value_;
};

namespace detail {
inline void appendAll(std::ostringstream &) {}
template <typename T, typename... Rest>
void appendAll(std::ostringstream &os, const T &first, const Rest &...rest) {
  os << first;
  appendAll(os, rest...);
}
} // namespace detail

/// Concatenates anything streamable into a string.
template <typename... Args> std::string strCat(const Args &...args) {
  std::ostringstream os;
  detail::appendAll(os, args...);
  return os.str();
}

template <typename... Args> Status invalidArgument(const Args &...args) {
  return Status(StatusCode::kInvalidArgument, strCat(args...));
}
template <typename... Args> Status notFound(const Args &...args) {
  return Status(StatusCode::kNotFound, strCat(args...));
}
template <typename... Args> Status outOfRange(const Args &...args) {
  return Status(StatusCode::kOutOfRange, strCat(args...));
}
template <typename... Args> Status unimplemented(const Args &...args) {
  return Status(StatusCode::kUnimplemented, strCat(args...));
}
template <typename... Args> Status dataLoss(const Args &...args) {
  return Status(StatusCode::kDataLoss, strCat(args...));
}
template <typename... Args> Status unavailable(const Args &...args) {
  return Status(StatusCode::kUnavailable, strCat(args...));
}
template <typename... Args> Status peerLost(const Args &...args) {
  return Status(StatusCode::kPeerLost, strCat(args...));
}
template <typename... Args> Status deadlineExceeded(const Args &...args) {
  return Status(StatusCode::kDeadlineExceeded, strCat(args...));
}
template <typename... Args> Status internalError(const Args &...args) {
  return Status(StatusCode::kInternal, strCat(args...));
}

} // namespace dtcc::runtime

#define DTCC_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    ::dtcc::runtime::Status _dtcc_status = (expr);                             \
    if (!_dtcc_status.isOk())                                                  \
      return _dtcc_status;                                                     \
  } while (0)

#define DTCC_CONCAT_INNER(a, b) a##b
#define DTCC_CONCAT(a, b) DTCC_CONCAT_INNER(a, b)
#define DTCC_ASSIGN_OR_RETURN(lhs, expr)                                       \
  DTCC_ASSIGN_OR_RETURN_IMPL(DTCC_CONCAT(_dtcc_statusor, __LINE__), lhs, expr)
#define DTCC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                             \
  auto tmp = (expr);                                                           \
  if (!tmp.isOk())                                                             \
    return tmp.status();                                                       \
  lhs = std::move(tmp).value()

#endif // DTCC_RUNTIME_BASE_STATUS_H
