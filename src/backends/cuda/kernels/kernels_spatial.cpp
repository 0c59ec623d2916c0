// CUDA adapters of the spatial families (conv2d, pools, batch norm and synchronised batch norm), reading
// the window geometry as ops/defs/spatial_util.h does. conv2d runs on cuDNN where it can (fp32 without autocast:
// cudnn_conv.cu), else im2col + one cuBLAS GEMM per sample, as the CPU kernel (bias fill then GEMM with beta 1;
// weight gradient accumulated over samples with beta 1); the column matrix of one sample is the CUDA workspace
// (and cuDNN's).
#include <algorithm>

#include "backends/cuda/kernels/kernels.h"
#include "ops/defs/spatial_util.h"

namespace braid::ops::cuda_table {
namespace {

namespace cu = braid::cuda;
using Span = std::span<const Tensor>;

cu::Window window(const char* op, const Attrs& a, const TensorDesc& x) {
  spatial::Window s = spatial::window_of(op, a, x);
  cu::Window w;
  w.B = s.B, w.C = s.C, w.H = s.H, w.W = s.W, w.kh = s.kh, w.kw = s.kw, w.sh = s.sh, w.sw = s.sw, w.ph = s.ph,
  w.pw = s.pw, w.Ho = s.Ho, w.Wo = s.Wo;
  return w;
}

bool direct(const cu::Window& w) {
  return w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.ph == 0 && w.pw == 0;
}

size_t col_bytes(const Attrs& a, const TensorDesc& x) {
  cu::Window w = window("conv2d", a, x);
  return direct(w) ? 0 : static_cast<size_t>(w.C * w.kh * w.kw * w.Ho * w.Wo) * dtype_size(x.dtype);
}

void* col_scratch(const CudaCtx& c, size_t bytes) {
  BRAID_ASSERT(c.workspace_bytes >= bytes, "conv2d: CUDA workspace of ", c.workspace_bytes, " bytes, needs ", bytes);
  return c.workspace;
}

char* at(const Tensor& t, int64_t elems) { return static_cast<char*>(t.raw()) + elems * static_cast<int64_t>(dtype_size(t.dtype())); }

// y[b] (O, P) = weight (O, K) @ col(x[b]) (K, P) (+ bias)
void conv2d_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::Window w = window("conv2d", a, in[0].desc());
  DType t = out[0].dtype();
  int64_t O = out[0].shape()[1], K = w.C * w.kh * w.kw, P = w.Ho * w.Wo;
  bool bias = in.size() > 2;
  if (bias) cu::channel_fill(c, t, in[2].raw(), out[0].raw(), w.B, O, P);
  if (cu::cudnn_conv_forward(c, t, in[0].raw(), in[1].raw(), out[0].raw(), w, O, bias)) return;
  void* col = direct(w) ? nullptr : col_scratch(c, col_bytes(a, in[0].desc()));
  for (int64_t b = 0; b < w.B; ++b) {
    const char* xb = at(in[0], b * w.C * w.H * w.W);
    if (col) cu::im2col(c, t, xb, w, col);
    cu::gemm(c, t, false, false, O, P, K, 1.f, in[1].raw(), K, 0, col ? col : xb, P, 0, bias ? 1.f : 0.f,
             at(out[0], b * O * P), P, 0);
  }
}
size_t conv2d_ws(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return col_bytes(a, in[0]);
}

// dcol (K, P) = weight^T @ dy[b]; dx[b] = col2im(dcol)
void grad_input_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::Window w = window("conv2d", a, in[1].desc());
  DType t = out[0].dtype();
  int64_t O = in[0].shape()[1], K = w.C * w.kh * w.kw, P = w.Ho * w.Wo;
  if (cu::cudnn_conv_backward_data(c, t, in[0].raw(), in[2].raw(), out[0].raw(), w, O)) return;
  void* dcol = direct(w) ? nullptr : col_scratch(c, col_bytes(a, in[1].desc()));
  for (int64_t b = 0; b < w.B; ++b) {
    char* dxb = at(out[0], b * w.C * w.H * w.W);
    cu::gemm(c, t, true, false, K, P, O, 1.f, in[2].raw(), K, 0, at(in[0], b * O * P), P, 0, 0.f, dcol ? dcol : dxb,
             P, 0);
    if (dcol) cu::col2im(c, t, dcol, w, dxb);
  }
}
size_t grad_input_ws(const Attrs& a, std::span<const TensorDesc> in, std::span<const TensorDesc>) {
  return col_bytes(a, in[1]);
}

// dweight (O, K) = sum over b of dy[b] (O, P) @ col(x[b])^T
void grad_weight_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::Window w = window("conv2d", a, in[1].desc());
  DType t = out[0].dtype();
  int64_t O = in[0].shape()[1], K = w.C * w.kh * w.kw, P = w.Ho * w.Wo;
  if (cu::cudnn_conv_backward_filter(c, t, in[0].raw(), in[1].raw(), out[0].raw(), w, O)) return;
  void* col = direct(w) ? nullptr : col_scratch(c, col_bytes(a, in[1].desc()));
  if (w.B == 0) cu::fill(c, t, out[0].raw(), out[0].numel(), 0.0);
  for (int64_t b = 0; b < w.B; ++b) {
    const char* xb = at(in[1], b * w.C * w.H * w.W);
    if (col) cu::im2col(c, t, xb, w, col);
    cu::gemm(c, t, false, true, O, K, P, 1.f, at(in[0], b * O * P), P, 0, col ? col : xb, P, 0, b == 0 ? 0.f : 1.f,
             out[0].raw(), K, 0);
  }
}

void grad_bias_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  const Shape& s = in[0].shape();
  int64_t B = s[0], O = s[1], P = s.numel() / std::max<int64_t>(1, B * O);
  cu::channel_sum(c, out[0].dtype(), in[0].raw(), out[0].raw(), B, O, P);
}

// ---- pools ----------------------------------------------------------------------------------------------------
void max_pool_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::max_pool(c, out[0].dtype(), in[0].raw(), out[0].raw(), out[1].data<int64_t>(), window("max_pool2d", a, in[0].desc()));
}
void max_pool_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::max_pool_grad(c, out[0].dtype(), in[0].raw(), in[1].raw(), in[1].dtype() == DType::i64, out[0].raw(),
                    window("max_pool2d", a, in[2].desc()));
}
void avg_pool_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::avg_pool(c, out[0].dtype(), in[0].raw(), out[0].raw(), window("avg_pool2d", a, in[0].desc()));
}
void avg_pool_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  cu::avg_pool_grad(c, out[0].dtype(), in[0].raw(), out[0].raw(), window("avg_pool2d", a, in[1].desc()));
}
void global_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t planes = out[0].numel();
  cu::global_avg_pool(c, out[0].dtype(), in[0].raw(), out[0].raw(), planes, in[0].numel() / std::max<int64_t>(1, planes));
}
void global_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  int64_t planes = in[0].numel();
  cu::global_avg_pool_grad(c, out[0].dtype(), in[0].raw(), out[0].raw(), planes,
                           out[0].numel() / std::max<int64_t>(1, planes));
}

// ---- batch norm ------------------------------------------------------------------------------------------------
struct Layout {
  int64_t B, C, S;
};
Layout layout_of(const Shape& s) { return {s[0], s[1], s.numel() / std::max<int64_t>(1, s[0] * s[1])}; }

void bn_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  Layout l = layout_of(in[0].shape());
  cu::batch_norm(c, out[0].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), in[4].raw(), in[5].raw(),
                 in[5].dtype() == DType::i64, out[0].raw(), out[1].raw(), out[2].raw(), l.B, l.C, l.S, a.f("eps"),
                 a.f("momentum"), c.training);
}
void bn_grad_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  Layout l = layout_of(in[1].shape());
  cu::batch_norm_grad(c, out[0].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), in[4].raw(), out[0].raw(),
                      out[1].raw(), out[2].raw(), l.B, l.C, l.S, c.training);
}
void bn_sync_sum_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  Layout l = layout_of(in[0].shape());
  cu::bn_sync_sum(c, in[0].dtype(), in[0].raw(), out[0].data<double>(), l.B, l.C, l.S);
}
void bn_sync_sqdev_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  Layout l = layout_of(in[0].shape());
  cu::bn_sync_sqdev(c, in[0].dtype(), in[0].raw(), in[1].data<double>(), out[0].data<double>(), l.B, l.C, l.S,
                    static_cast<double>(a.i("total")));
}
void bn_sync_apply_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  BRAID_ASSERT(c.training, "bn_sync_apply runs in training only (evaluation uses batch_norm)");
  Layout l = layout_of(in[0].shape());
  cu::bn_sync_apply(c, out[0].dtype(), in[0].raw(), in[1].data<double>(), in[2].data<double>(), in[3].raw(),
                    in[4].raw(), in[5].raw(), in[6].raw(), in[7].raw(), in[7].dtype() == DType::i64, out[0].raw(),
                    out[1].raw(), out[2].raw(), l.B, l.C, l.S, a.f("eps"), a.f("momentum"),
                    static_cast<double>(a.i("total")));
}
void bn_sync_grad_sums_cuda(const CudaCtx& c, const Attrs&, Span in, Span out) {
  Layout l = layout_of(in[1].shape());
  cu::bn_sync_grad_sums(c, in[1].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), out[0].data<double>(),
                        l.B, l.C, l.S);
}
void bn_sync_grad_cuda(const CudaCtx& c, const Attrs& a, Span in, Span out) {
  Layout l = layout_of(in[1].shape());
  cu::bn_sync_grad(c, out[0].dtype(), in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(), in[4].raw(),
                   in[5].data<double>(), in[6].data<double>(), out[0].raw(), out[1].raw(), out[2].raw(), l.B, l.C, l.S,
                   static_cast<double>(a.i("total")));
}

}  // namespace

std::vector<Entry> spatial_entries() {
  return {
      {"conv2d", conv2d_cuda, conv2d_ws},
      {"conv2d_grad_input", grad_input_cuda, grad_input_ws},
      {"conv2d_grad_weight", grad_weight_cuda, grad_input_ws},
      {"conv2d_grad_bias", grad_bias_cuda, nullptr},
      {"max_pool2d", max_pool_cuda, nullptr},
      {"max_pool2d_grad", max_pool_grad_cuda, nullptr},
      {"avg_pool2d", avg_pool_cuda, nullptr},
      {"avg_pool2d_grad", avg_pool_grad_cuda, nullptr},
      {"global_avg_pool", global_cuda, nullptr},
      {"global_avg_pool_grad", global_grad_cuda, nullptr},
      {"batch_norm", bn_cuda, nullptr},
      {"batch_norm_grad", bn_grad_cuda, nullptr},
      {"bn_sync_sum", bn_sync_sum_cuda, nullptr},
      {"bn_sync_sqdev", bn_sync_sqdev_cuda, nullptr},
      {"bn_sync_apply", bn_sync_apply_cuda, nullptr},
      {"bn_sync_grad_sums", bn_sync_grad_sums_cuda, nullptr},
      {"bn_sync_grad", bn_sync_grad_cuda, nullptr},
  };
}

}  // namespace braid::ops::cuda_table
