//===- CudnnConvTypes.cpp - cuDNN's types of a convolution's dtype --------===//

#include "runtime/device/cuda/CudaConv.h"

namespace dtcc::runtime::cuda {

StatusOr<CudnnConvTypes> cudnnConvTypes(DType dtype, bool allowTf32) {
  switch (dtype) {
  case DType::kF32:
    return CudnnConvTypes{CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                          allowTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH,
                          false};
  case DType::kF64:
    return CudnnConvTypes{CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE,
                          CUDNN_DEFAULT_MATH, true};
  case DType::kF16:
    return CudnnConvTypes{CUDNN_DATA_HALF, CUDNN_DATA_FLOAT,
                          CUDNN_TENSOR_OP_MATH, false};
  case DType::kBF16:
    return CudnnConvTypes{CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT,
                          CUDNN_TENSOR_OP_MATH, false};
  default:
    return unimplemented("no cuDNN convolution for element type ",
                         dtypeName(dtype));
  }
}

} // namespace dtcc::runtime::cuda
