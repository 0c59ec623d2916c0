// softmax and its gradient on cuDNN (cudnnSoftmaxForward / Backward, CUDNN_SOFTMAX_ACCURATE: exp(x - max) / sum)
// for fp32 values: x viewed as (outer, n, inner) around the axis is the NCHW tensor (outer, n, inner, 1) and
// CUDNN_SOFTMAX_MODE_CHANNEL normalises over n at every (outer, inner). Deterministic (row-wise). bf16 values and
// tensors beyond cuDNN's int sizes return false: the own kernels of norm.cu run instead.
#include <cudnn.h>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

struct TensorDesc4 {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc4(int64_t outer, int64_t n, int64_t inner) {
    BRAID_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    BRAID_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(outer),
                                                 static_cast<int>(n), static_cast<int>(inner), 1));
  }
  ~TensorDesc4() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc4(const TensorDesc4&) = delete;
  TensorDesc4& operator=(const TensorDesc4&) = delete;
};

bool usable(const Ctx& c, DType t, int64_t outer, int64_t n, int64_t inner) {
  return t == DType::f32 && c.cudnn != nullptr && outer > 0 && n > 0 && inner > 0 && outer * n * inner < (1LL << 31);
}

}  // namespace

bool cudnn_softmax(const Ctx& c, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner) {
  if (!usable(c, t, outer, n, inner)) return false;
  TensorDesc4 d(outer, n, inner);
  const float one = 1.f, zero = 0.f;
  BRAID_CUDNN_CHECK(cudnnSoftmaxForward(static_cast<cudnnHandle_t>(c.cudnn), CUDNN_SOFTMAX_ACCURATE,
                                        CUDNN_SOFTMAX_MODE_CHANNEL, &one, d.d, x, &zero, d.d, y));
  return true;
}

bool cudnn_softmax_grad(const Ctx& c, DType t, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                        int64_t inner) {
  if (!usable(c, t, outer, n, inner)) return false;
  TensorDesc4 d(outer, n, inner);
  const float one = 1.f, zero = 0.f;
  BRAID_CUDNN_CHECK(cudnnSoftmaxBackward(static_cast<cudnnHandle_t>(c.cudnn), CUDNN_SOFTMAX_ACCURATE,
                                         CUDNN_SOFTMAX_MODE_CHANNEL, &one, d.d, y, d.d, dy, &zero, d.d, dx));
  return true;
}

}  // namespace braid::cuda
