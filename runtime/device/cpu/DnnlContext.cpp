//===- DnnlContext.cpp - the process's oneDNN engine and stream -----------===//

#include "runtime/device/cpu/DnnlContext.h"
#include "runtime/base/Format.h"

#include <oneapi/dnnl/dnnl_debug.h>

namespace dtcc::runtime::cpu {

Status dnnlError(dnnl_status_t s, const char *call) {
  StatusCode code = s == dnnl_unimplemented ? StatusCode::kUnimplemented
                                            : StatusCode::kInternal;
  return Status(code, strCat("oneDNN ", dnnl_status2str(s), " in ", call));
}

const DnnlContext &dnnlContext() {
  static const DnnlContext context = [] {
    DnnlContext c;
    c.status = [&]() -> Status {
      DTCC_DNNL_CHECK(dnnl_engine_create(&c.engine, dnnl_cpu, 0));
      DTCC_DNNL_CHECK(
          dnnl_stream_create(&c.stream, c.engine, dnnl_stream_default_flags));
      return Status::ok();
    }();
    return c;
  }();
  return context;
}

} // namespace dtcc::runtime::cpu
