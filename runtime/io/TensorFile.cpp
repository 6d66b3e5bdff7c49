//===- TensorFile.cpp - decoding and encoding TensorProto -----------------===//

#include "runtime/io/TensorFile.h"

#include "onnx/onnx_pb.h"

#include <cstring>
#include <fstream>

namespace dtcc::runtime {
namespace {

/// The most elements a tensor file may declare (2^48).
constexpr int64_t kMaxTensorElements = int64_t(1) << 48;

/// Copies a repeated proto field into `out`, converting each element.
template <typename Out, typename Field>
void copyField(const Field &field, HostTensor &out) {
  auto *dst = out.data<Out>();
  int64_t i = 0;
  for (auto v : field)
    dst[i++] = static_cast<Out>(v);
}

std::string dirName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

StatusOr<std::string> readExternal(const onnx::TensorProto &proto,
                                   const std::string &baseDir,
                                   int64_t expectedBytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : proto.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::atoll(kv.value().c_str());
    else if (kv.key() == "length")
      length = std::atoll(kv.value().c_str());
  }
  if (location.empty())
    return invalidArgument("tensor '", proto.name(),
                           "' has external data without a location");
  // ONNX requires locations relative to the model's directory; refusing
  // others keeps a model from reading arbitrary files.
  if (location[0] == '/' || location.find("..") != std::string::npos)
    return invalidArgument("tensor '", proto.name(), "': external data "
                           "location '", location, "' must be a relative path "
                           "inside the model's directory");
  std::string path = baseDir + "/" + location;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return notFound("tensor '", proto.name(), "': external data file '",
                    location, "' not found (looked for ", path, ")");
  int64_t fileSize = static_cast<int64_t>(in.tellg());
  if (length < 0)
    length = fileSize - offset;
  if (offset < 0 || length < 0 || offset > fileSize || length > fileSize - offset)
    return dataLoss("tensor '", proto.name(), "': external data file '",
                    location, "' has ", fileSize, " bytes, need ",
                    offset + length);
  if (length != expectedBytes)
    return dataLoss("tensor '", proto.name(), "': external data has ", length,
                    " bytes, expected ", expectedBytes);
  std::string bytes(length, '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in)
    return dataLoss("tensor '", proto.name(), "': cannot read ", length,
                    " bytes of '", path, "'");
  return bytes;
}

} // namespace

StatusOr<HostTensor> decodeTensorProto(const onnx::TensorProto &proto,
                                       const std::string &baseDir) {
  if (!isValidDType(proto.data_type()))
    return unimplemented("tensor '", proto.name(), "' has element type ",
                         onnx::TensorProto_DataType_Name(
                             static_cast<onnx::TensorProto_DataType>(
                                 proto.data_type())),
                         ", which dtcc does not support");
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  // Check the size before allocating: a corrupt header must not ask for
  // terabytes.
  DType dtype = static_cast<DType>(proto.data_type());
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return invalidArgument("tensor '", proto.name(),
                             "' has a negative dimension ", d);
    if (d != 0 && n > kMaxTensorElements / d)
      return invalidArgument("tensor '", proto.name(), "' has more than 2^48 "
                             "elements");
    n *= d;
  }
  int64_t bytes = n * dtypeSize(dtype);

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    DTCC_ASSIGN_OR_RETURN(std::string raw, readExternal(proto, baseDir, bytes));
    HostTensor t(dtype, shape);
    std::memcpy(t.bytes.data(), raw.data(), bytes);
    return t;
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes)
      return dataLoss("tensor '", proto.name(), "' has ",
                      proto.raw_data().size(), " bytes of raw data, expected ",
                      bytes, " for ", HostTensor::typeString(dtype, shape));
    HostTensor t(dtype, shape);
    std::memcpy(t.bytes.data(), proto.raw_data().data(), bytes);
    return t;
  }
  int64_t given = proto.float_data_size() + proto.double_data_size() +
                  proto.int64_data_size() + proto.uint64_data_size() +
                  proto.int32_data_size();
  if (given != n)
    return dataLoss("tensor '", proto.name(), "' has ", given,
                    " values, expected ", n, " for ",
                    HostTensor::typeString(dtype, shape));
  HostTensor t(dtype, shape);

  auto expectCount = [&](int64_t count) -> Status {
    if (count != n)
      return dataLoss("tensor '", proto.name(), "' has ", count,
                      " values, expected ", n, " for ", t.typeString());
    return Status::ok();
  };
  switch (t.dtype) {
  case DType::kF32:
    DTCC_RETURN_IF_ERROR(expectCount(proto.float_data_size()));
    copyField<float>(proto.float_data(), t);
    break;
  case DType::kF64:
    DTCC_RETURN_IF_ERROR(expectCount(proto.double_data_size()));
    copyField<double>(proto.double_data(), t);
    break;
  case DType::kI64:
    DTCC_RETURN_IF_ERROR(expectCount(proto.int64_data_size()));
    copyField<int64_t>(proto.int64_data(), t);
    break;
  case DType::kU32:
    DTCC_RETURN_IF_ERROR(expectCount(proto.uint64_data_size()));
    copyField<uint32_t>(proto.uint64_data(), t);
    break;
  case DType::kU64:
    DTCC_RETURN_IF_ERROR(expectCount(proto.uint64_data_size()));
    copyField<uint64_t>(proto.uint64_data(), t);
    break;
  case DType::kI32:
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    copyField<int32_t>(proto.int32_data(), t);
    break;
  case DType::kI16:
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    copyField<int16_t>(proto.int32_data(), t);
    break;
  case DType::kI8:
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    copyField<int8_t>(proto.int32_data(), t);
    break;
  case DType::kU16:
  case DType::kF16:
  case DType::kBF16: // 16-bit floats travel as their bits in int32_data
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    copyField<uint16_t>(proto.int32_data(), t);
    break;
  case DType::kU8:
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    copyField<uint8_t>(proto.int32_data(), t);
    break;
  case DType::kBool: {
    DTCC_RETURN_IF_ERROR(expectCount(proto.int32_data_size()));
    auto *dst = t.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = proto.int32_data(i) != 0;
    break;
  }
  case DType::kInvalid:
    return internalError("invalid dtype");
  }
  return t;
}

StatusOr<HostTensor> readTensorFile(const std::string &path,
                                    std::string *name) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return notFound("cannot open tensor file '", path, "'");
  onnx::TensorProto proto;
  if (!proto.ParseFromIstream(&in))
    return dataLoss("'", path, "' is not an ONNX TensorProto file");
  if (name)
    *name = proto.name();
  auto t = decodeTensorProto(proto, dirName(path));
  if (!t.isOk())
    return t.status().withContext(path);
  return t;
}

Status writeTensorFile(const std::string &path, const std::string &name,
                       const HostTensor &tensor) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(static_cast<int32_t>(tensor.dtype));
  for (int64_t d : tensor.shape)
    proto.add_dims(d);
  proto.set_raw_data(tensor.bytes.data(), tensor.bytes.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !proto.SerializeToOstream(&out))
    return unavailable("cannot write tensor file '", path, "'");
  return Status::ok();
}

} // namespace dtcc::runtime
