//===- TensorFile.h - ONNX TensorProto files --------------------*- C++ -*-===//
//
// Inputs and outputs of compiled programs are ONNX TensorProto files (.pb),
// as in ONNX's own test data. The frontend reuses the decoding for
// initializers, including tensors whose bytes live in external data files.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_IO_TENSORFILE_H
#define DTCC_RUNTIME_IO_TENSORFILE_H

#include "runtime/base/HostTensor.h"
#include "runtime/base/Status.h"

#include <string>

namespace onnx {
class TensorProto;
}

namespace dtcc::runtime {

/// Decodes a TensorProto. `baseDir` resolves external data locations (the
/// directory of the model or of the .pb file). Errors name the tensor.
StatusOr<HostTensor> decodeTensorProto(const onnx::TensorProto &proto,
                                       const std::string &baseDir);

/// Reads a .pb file holding one TensorProto; `name` receives its name.
StatusOr<HostTensor> readTensorFile(const std::string &path,
                                    std::string *name = nullptr);

/// Writes `tensor` as a TensorProto named `name` (raw little-endian data).
Status writeTensorFile(const std::string &path, const std::string &name,
                       const HostTensor &tensor);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_IO_TENSORFILE_H
