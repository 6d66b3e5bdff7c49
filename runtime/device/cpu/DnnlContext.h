//===- DnnlContext.h - the process's oneDNN engine and stream ---*- C++ -*-===//
//
// One CPU engine and stream for every oneDNN primitive dtcc makes (the
// convolutions and the matrix products), and oneDNN's status codes as
// dtcc's Status.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_DEVICE_CPU_DNNLCONTEXT_H
#define DTCC_RUNTIME_DEVICE_CPU_DNNLCONTEXT_H

#include "runtime/base/Status.h"

#include <oneapi/dnnl/dnnl.h>

namespace dtcc::runtime::cpu {

/// Returns from the enclosing function (which returns Status) with the
/// oneDNN error of `call`, if any.
#define DTCC_DNNL_CHECK(call)                                                  \
  do {                                                                         \
    dnnl_status_t _dtcc_s = (call);                                            \
    if (_dtcc_s != dnnl_success)                                               \
      return ::dtcc::runtime::cpu::dnnlError(_dtcc_s, #call);                  \
  } while (0)

/// oneDNN's status `s` of `call` as a Status (unimplemented or internal).
Status dnnlError(dnnl_status_t s, const char *call);

/// The process's CPU engine and stream, made on first use; `status` says
/// whether making them failed.
struct DnnlContext {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  Status status;
};
const DnnlContext &dnnlContext();

} // namespace dtcc::runtime::cpu

#endif // DTCC_RUNTIME_DEVICE_CPU_DNNLCONTEXT_H
