// conv2d on cuDNN (v9's convolution API): forward, gradient of the input (backward data) and of the weight
// (backward filter) for fp32 values without autocast, NCHW, no groups or dilation (ops/defs/conv.cpp's op).
// Numerics kept to the CPU's precision: CUDNN_FMA_MATH (no TF32) and only the implicit-GEMM / GEMM algorithms
// (no FFT or Winograd, whose rounding differs more), chosen among cuDNN's heuristics by determinism
// (CUDNN_DETERMINISTIC, so runs repeat bit for bit) and by the workspace the op already has (the im2col column
// matrix's bytes). When none qualifies the caller falls back to im2col + cuBLAS (kernels_spatial.cpp), the
// previous path. Descriptors and the algorithm choice are made once per shape and kept.
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/cuda/kernels/device_util.cuh"

// cuDNN 9 marks the descriptor-based convolution API deprecated (the graph API replaces it); it is supported
// and is what PyTorch's cuDNN v7 path calls.
#pragma nv_diag_suppress 1444
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace braid::cuda {
namespace {

struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descs(const Window& win, int64_t O) {
    try {
      make(win, O);
    } catch (...) {  // a descriptor cuDNN refused: free the ones made
      destroy();
      throw;
    }
  }
  void make(const Window& win, int64_t O) {
    BRAID_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    BRAID_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    BRAID_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    BRAID_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    auto i = [](int64_t v) { return static_cast<int>(v); };
    BRAID_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(win.B), i(win.C), i(win.H), i(win.W)));
    BRAID_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(win.B), i(O), i(win.Ho), i(win.Wo)));
    BRAID_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(O), i(win.C), i(win.kh), i(win.kw)));
    BRAID_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, i(win.ph), i(win.pw), i(win.sh), i(win.sw), 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BRAID_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
  }
  ~Descs() { destroy(); }
  void destroy() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    x = y = nullptr;
    w = nullptr;
    conv = nullptr;
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

// Algorithm per (direction, device, shape, workspace): -1 = none qualifies (fall back).
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, size_t>;
std::mutex g_mu;
std::map<Key, int> g_algo;

Key key_of(int dir, const Ctx& c, const Window& w, int64_t O) {
  return Key{dir, c.device, w.B, w.C, w.H, w.W, O, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, c.workspace_bytes};
}

bool accurate_fwd(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
bool accurate_data(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool accurate_filter(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The first of cuDNN's ranked candidates that is accurate, deterministic, in FMA math (no TF32 or other tensor-op
// conversion) and whose workspace, asked again of cuDNN for that algorithm (`size`), fits; -1 if none.
template <typename Perf, typename Get, typename Ok, typename Size>
int choose(int dir, const Ctx& c, const Window& w, int64_t O, Get get, Ok ok, Size size) {
  const Key k = key_of(dir, c, w, O);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_algo.find(k);
    if (it != g_algo.end()) return it->second;
  }
  Perf perf[16];
  int n = 0;
  get(perf, 16, &n);
  int pick = -1;
  for (int i = 0; i < n && pick < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC && ok(perf[i].algo) &&
        (perf[i].mathType == CUDNN_FMA_MATH || perf[i].mathType == CUDNN_DEFAULT_MATH) &&
        perf[i].memory <= c.workspace_bytes && size(perf[i].algo) <= c.workspace_bytes)
      pick = static_cast<int>(perf[i].algo);
  std::lock_guard<std::mutex> lock(g_mu);
  g_algo[k] = pick;
  return pick;
}

// The descriptors of one convolution shape, made at its first call and kept for the process (host structs; a
// training step makes none).
const Descs& descs_of(const Window& w, int64_t O) {
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  static auto* made = new std::map<Shape, std::unique_ptr<Descs>>();  // never freed: outlives every stream
  const Shape k{w.B, w.C, w.H, w.W, O, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw};
  std::lock_guard<std::mutex> lock(g_mu);
  auto& d = (*made)[k];
  if (!d) d = std::make_unique<Descs>(w, O);
  return *d;
}

bool usable(const Ctx& c, DType t, const Window& w, int64_t O) {
  // fp32 values without autocast (autocast keeps the im2col path's 16-bit GEMMs); every tensor within the
  // 2^31 elements of cuDNN's int API (x, y and the filter).
  constexpr int64_t kMax = int64_t{1} << 31;
  return t == DType::f32 && c.autocast == nullptr && c.cudnn != nullptr && w.B > 0 && w.B * w.C * w.H * w.W < kMax &&
         w.B * O * w.Ho * w.Wo < kMax && O * w.C * w.kh * w.kw < kMax;
}

cudnnHandle_t handle(const Ctx& c) { return static_cast<cudnnHandle_t>(c.cudnn); }

}  // namespace

bool cudnn_conv_forward(const Ctx& c, DType t, const void* x, const void* w, void* y, const Window& win, int64_t O,
                        bool accumulate) {
  if (!usable(c, t, win, O)) return false;
  const Descs& d = descs_of(win, O);
  const int algo = choose<cudnnConvolutionFwdAlgoPerf_t>(
      0, c, win, O,
      [&](cudnnConvolutionFwdAlgoPerf_t* p, int cap, int* n) {
        BRAID_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle(c), d.x, d.w, d.conv, d.y, cap, n, p));
      },
      accurate_fwd,
      [&](cudnnConvolutionFwdAlgo_t a) {
        size_t bytes = 0;
        const cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(handle(c), d.x, d.w, d.conv, d.y, a, &bytes);
        if (st != CUDNN_STATUS_SUCCESS) return SIZE_MAX;  // not for this shape
        return bytes;
      });
  if (algo < 0) return false;
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  BRAID_CUDNN_CHECK(cudnnConvolutionForward(handle(c), &one, d.x, x, d.w, w, d.conv,
                                            static_cast<cudnnConvolutionFwdAlgo_t>(algo), c.workspace,
                                            c.workspace_bytes, &beta, d.y, y));
  return true;
}

bool cudnn_conv_backward_data(const Ctx& c, DType t, const void* dy, const void* w, void* dx, const Window& win,
                              int64_t O) {
  if (!usable(c, t, win, O)) return false;
  const Descs& d = descs_of(win, O);
  const int algo = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      1, c, win, O,
      [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int cap, int* n) {
        BRAID_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle(c), d.w, d.y, d.conv, d.x, cap, n, p));
      },
      accurate_data,
      [&](cudnnConvolutionBwdDataAlgo_t a) {
        size_t bytes = 0;
        const cudnnStatus_t st = cudnnGetConvolutionBackwardDataWorkspaceSize(handle(c), d.w, d.y, d.conv, d.x, a, &bytes);
        if (st != CUDNN_STATUS_SUCCESS) return SIZE_MAX;  // not for this shape
        return bytes;
      });
  if (algo < 0) return false;
  const float one = 1.f, zero = 0.f;
  BRAID_CUDNN_CHECK(cudnnConvolutionBackwardData(handle(c), &one, d.w, w, d.y, dy, d.conv,
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), c.workspace,
                                                 c.workspace_bytes, &zero, d.x, dx));
  return true;
}

bool cudnn_conv_backward_filter(const Ctx& c, DType t, const void* dy, const void* x, void* dw, const Window& win,
                                int64_t O) {
  if (!usable(c, t, win, O)) return false;
  const Descs& d = descs_of(win, O);
  const int algo = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      2, c, win, O,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int cap, int* n) {
        BRAID_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle(c), d.x, d.y, d.conv, d.w, cap, n, p));
      },
      accurate_filter,
      [&](cudnnConvolutionBwdFilterAlgo_t a) {
        size_t bytes = 0;
        const cudnnStatus_t st = cudnnGetConvolutionBackwardFilterWorkspaceSize(handle(c), d.x, d.y, d.conv, d.w, a, &bytes);
        if (st != CUDNN_STATUS_SUCCESS) return SIZE_MAX;  // not for this shape
        return bytes;
      });
  if (algo < 0) return false;
  const float one = 1.f, zero = 0.f;
  BRAID_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle(c), &one, d.x, x, d.y, dy, d.conv,
                                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), c.workspace,
                                                   c.workspace_bytes, &zero, d.w, dw));
  return true;
}

}  // namespace braid::cuda
