//===- FlagArg.h - one command-line flag of argv ----------------*- C++ -*-===//
//
// The runner's and the supervisor's flag parsers read argv one flag at a
// time; a flag's value is given as `--flag VALUE` or `--flag=VALUE`.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_FLAGARG_H
#define DTCC_RUNTIME_BASE_FLAGARG_H

#include "runtime/base/Status.h"

#include <string>

namespace dtcc::runtime {

/// argv[i] as a flag; value() consumes the next argument when the value is
/// not given after '='.
class FlagArg {
public:
  FlagArg(int argc, char **argv, int &i)
      : arg(argv[i]), argc_(argc), argv_(argv), i_(i) {}

  /// `flag` itself, or `flag=...`.
  bool is(const char *flag) const {
    return arg == flag || arg.rfind(std::string(flag) + "=", 0) == 0;
  }
  /// The value of `flag` (after '=' or the next argument).
  StatusOr<std::string> value(const char *flag) {
    std::string prefix = std::string(flag) + "=";
    if (arg.rfind(prefix, 0) == 0)
      return arg.substr(prefix.size());
    if (i_ + 1 >= argc_)
      return invalidArgument(flag, " needs a value");
    return std::string(argv_[++i_]);
  }

  const std::string arg;

private:
  int argc_;
  char **argv_;
  int &i_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_FLAGARG_H
