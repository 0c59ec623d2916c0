// conv2d helpers (im2col, its adjoint col2im, per-channel bias fill and sum) and the 2-D pools, mirroring
// ops/defs/conv.cpp and pool.cpp. Gradients that the CPU scatters (col2im, max/avg pool backward) are
// gathers here: one thread per input pixel adds its contributions in increasing output order, the CPU's
// order, so results are deterministic (and bit-identical in f32 for the pools). The GEMMs are cuBLAS calls
// made by the adapters (backends/cuda/kernels/conv_ops.cpp).
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

template <typename T>
__global__ void im2col_kernel(const T* x, Window w, T* col) {
  int64_t P = w.Ho * w.Wo, n = w.C * w.kh * w.kw * P;
  BRAID_GRID_LOOP(e, n) {
    int64_t row = e / P, pos = e % P, oh = pos / w.Wo, ow = pos % w.Wo;
    int64_t c = row / (w.kh * w.kw), i = (row / w.kw) % w.kh, j = row % w.kw;
    int64_t h = oh * w.sh - w.ph + i, ww = ow * w.sw - w.pw + j;
    col[e] = (h >= 0 && h < w.H && ww >= 0 && ww < w.W) ? x[(c * w.H + h) * w.W + ww] : from_f<T>(0.f);
  }
}

// First and one-past-last output index o along an axis whose window (o s - p .. o s - p + k - 1) covers x.
__device__ inline void covering(int64_t x, int64_t k, int64_t s, int64_t p, int64_t n_out, int64_t* lo, int64_t* hi) {
  int64_t a = x + p - k + 1;  // o s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t b = x + p;  // o s <= b
  *hi = b < 0 ? 0 : min(n_out, b / s + 1);
}

// x[c, h, w] = sum over taps (i, j) of col[(c, i, j), (oh, ow)] with oh sh - ph + i = h: CPU order is
// (i, j) outer, output position inner, so taps are visited in that order.
template <typename T>
__global__ void col2im_kernel(const T* col, Window w, T* x) {
  int64_t P = w.Ho * w.Wo, n = w.C * w.H * w.W;
  BRAID_GRID_LOOP(e, n) {
    int64_t c = e / (w.H * w.W), h = (e / w.W) % w.H, ww = e % w.W;
    float acc = 0.f;
    for (int64_t i = 0; i < w.kh; ++i) {
      int64_t th = h + w.ph - i;
      if (th < 0 || th % w.sh) continue;
      int64_t oh = th / w.sh;
      if (oh >= w.Ho) continue;
      for (int64_t j = 0; j < w.kw; ++j) {
        int64_t tw = ww + w.pw - j;
        if (tw < 0 || tw % w.sw) continue;
        int64_t ow = tw / w.sw;
        if (ow >= w.Wo) continue;
        acc = __fadd_rn(acc, to_f(col[((c * w.kh + i) * w.kw + j) * P + oh * w.Wo + ow]));
      }
    }
    x[e] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void channel_fill_kernel(const T* bias, T* y, int64_t B, int64_t O, int64_t P) {
  BRAID_GRID_LOOP(e, B * O * P) y[e] = bias[(e / P) % O];
}

template <typename T>
__global__ void channel_sum_kernel(const T* dy, T* db, int64_t B, int64_t O, int64_t P) {
  int64_t o = blockIdx.x;
  double s = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = threadIdx.x; e < P; e += blockDim.x) s += to_f(dy[(b * O + o) * P + e]);
  s = block_sum(s);
  if (threadIdx.x == 0) db[o] = from_d<T>(s);
}

template <typename T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* arg, Window w) {
  int64_t P = w.Ho * w.Wo;
  BRAID_GRID_LOOP(o, w.B * w.C * P) {
    int64_t p = o / P, oh = (o % P) / w.Wo, ow = o % w.Wo;
    const T* xp = x + p * w.H * w.W;
    int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
    int64_t hs = max(h0, int64_t{0}), he = min(h0 + w.kh, w.H), ws = max(w0, int64_t{0}), we = min(w0 + w.kw, w.W);
    float m = -INFINITY;
    int64_t best = hs * w.W + ws;
    for (int64_t h = hs; h < he; ++h)
      for (int64_t ww = ws; ww < we; ++ww) {
        float v = to_f(xp[h * w.W + ww]);
        if (v > m || isnan(v)) {
          m = v;
          best = h * w.W + ww;
        }
      }
    y[o] = from_f<T>(m);
    arg[o] = best;
  }
}

template <typename T>
__global__ void max_pool_grad_kernel(const T* dy, const void* arg, bool i64, T* dx, Window w) {
  int64_t P = w.Ho * w.Wo, plane = w.H * w.W;
  BRAID_GRID_LOOP(e, w.B * w.C * plane) {
    int64_t p = e / plane, h = (e % plane) / w.W, ww = e % w.W, local = e % plane;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, w.kh, w.sh, w.ph, w.Ho, &oh0, &oh1);
    covering(ww, w.kw, w.sw, w.pw, w.Wo, &ow0, &ow1);
    float acc = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t o = p * P + oh * w.Wo + ow;
        if (load_id(arg, i64, o) == local) acc = __fadd_rn(acc, to_f(dy[o]));
      }
    dx[e] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, T* y, Window w) {
  int64_t P = w.Ho * w.Wo;
  float div = static_cast<float>(w.kh * w.kw);
  BRAID_GRID_LOOP(o, w.B * w.C * P) {
    int64_t p = o / P, oh = (o % P) / w.Wo, ow = o % w.Wo;
    const T* xp = x + p * w.H * w.W;
    int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
    float acc = 0.f;
    for (int64_t h = max(h0, int64_t{0}); h < min(h0 + w.kh, w.H); ++h)
      for (int64_t ww = max(w0, int64_t{0}); ww < min(w0 + w.kw, w.W); ++ww) acc = __fadd_rn(acc, to_f(xp[h * w.W + ww]));
    y[o] = from_f<T>(__fdiv_rn(acc, div));
  }
}

template <typename T>
__global__ void avg_pool_grad_kernel(const T* dy, T* dx, Window w) {
  int64_t P = w.Ho * w.Wo, plane = w.H * w.W;
  float div = static_cast<float>(w.kh * w.kw);
  BRAID_GRID_LOOP(e, w.B * w.C * plane) {
    int64_t p = e / plane, h = (e % plane) / w.W, ww = e % w.W;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, w.kh, w.sh, w.ph, w.Ho, &oh0, &oh1);
    covering(ww, w.kw, w.sw, w.pw, w.Wo, &ow0, &ow1);
    float acc = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) acc = __fadd_rn(acc, __fdiv_rn(to_f(dy[p * P + oh * w.Wo + ow]), div));
    dx[e] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void global_avg_kernel(const T* x, T* y, int64_t n) {
  int64_t p = blockIdx.x;
  double s = 0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) s += to_f(x[p * n + e]);
  s = block_sum(s);
  if (threadIdx.x == 0) y[p] = from_d<T>(s / static_cast<double>(n));
}

template <typename T>
__global__ void global_avg_grad_kernel(const T* dy, T* dx, int64_t planes, int64_t n) {
  float div = static_cast<float>(n);
  BRAID_GRID_LOOP(e, planes * n) dx[e] = from_f<T>(__fdiv_rn(to_f(dy[e / n]), div));
}

}  // namespace

#define BRAID_T(ptr) static_cast<T*>(ptr)
#define BRAID_CT(ptr) static_cast<const T*>(ptr)

void im2col(const Ctx& c, DType t, const void* x, const Window& w, void* col) {
  int64_t n = w.C * w.kh * w.kw * w.Ho * w.Wo;
  if (n == 0) return;
  dispatch(t, "im2col", [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(x), w, BRAID_T(col));
    BRAID_LAUNCH_CHECK("im2col_kernel");
  });
}

void col2im(const Ctx& c, DType t, const void* col, const Window& w, void* x) {
  int64_t n = w.C * w.H * w.W;
  if (n == 0) return;
  dispatch(t, "col2im", [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(col), w, BRAID_T(x));
    BRAID_LAUNCH_CHECK("col2im_kernel");
  });
}

void channel_fill(const Ctx& c, DType t, const void* bias, void* y, int64_t B, int64_t O, int64_t P) {
  if (B * O * P == 0) return;
  dispatch(t, "channel_fill", [&](auto tag) {
    using T = decltype(tag);
    channel_fill_kernel<T><<<blocks_for(B * O * P), 256, 0, stream_of(c)>>>(BRAID_CT(bias), BRAID_T(y), B, O, P);
    BRAID_LAUNCH_CHECK("channel_fill_kernel");
  });
}

void channel_sum(const Ctx& c, DType t, const void* dy, void* db, int64_t B, int64_t O, int64_t P) {
  if (O == 0) return;
  dispatch(t, "channel_sum", [&](auto tag) {
    using T = decltype(tag);
    channel_sum_kernel<T><<<static_cast<unsigned>(O), 256, 0, stream_of(c)>>>(BRAID_CT(dy), BRAID_T(db), B, O, P);
    BRAID_LAUNCH_CHECK("channel_sum_kernel");
  });
}

void max_pool(const Ctx& c, DType t, const void* x, void* y, int64_t* argmax, const Window& w) {
  int64_t n = w.B * w.C * w.Ho * w.Wo;
  if (n == 0) return;
  dispatch(t, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(x), BRAID_T(y), argmax, w);
    BRAID_LAUNCH_CHECK("max_pool_kernel");
  });
}

void max_pool_grad(const Ctx& c, DType t, const void* dy, const void* argmax, bool argmax_i64, void* dx,
                   const Window& w) {
  int64_t n = w.B * w.C * w.H * w.W;
  if (n == 0) return;
  dispatch(t, "max_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    max_pool_grad_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(dy), argmax, argmax_i64, BRAID_T(dx), w);
    BRAID_LAUNCH_CHECK("max_pool_grad_kernel");
  });
}

void avg_pool(const Ctx& c, DType t, const void* x, void* y, const Window& w) {
  int64_t n = w.B * w.C * w.Ho * w.Wo;
  if (n == 0) return;
  dispatch(t, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(x), BRAID_T(y), w);
    BRAID_LAUNCH_CHECK("avg_pool_kernel");
  });
}

void avg_pool_grad(const Ctx& c, DType t, const void* dy, void* dx, const Window& w) {
  int64_t n = w.B * w.C * w.H * w.W;
  if (n == 0) return;
  dispatch(t, "avg_pool2d_grad", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_grad_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(BRAID_CT(dy), BRAID_T(dx), w);
    BRAID_LAUNCH_CHECK("avg_pool_grad_kernel");
  });
}

void global_avg_pool(const Ctx& c, DType t, const void* x, void* y, int64_t planes, int64_t n) {
  if (planes == 0) return;
  dispatch(t, "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    global_avg_kernel<T><<<static_cast<unsigned>(planes), 128, 0, stream_of(c)>>>(BRAID_CT(x), BRAID_T(y), n);
    BRAID_LAUNCH_CHECK("global_avg_kernel");
  });
}

void global_avg_pool_grad(const Ctx& c, DType t, const void* dy, void* dx, int64_t planes, int64_t n) {
  if (planes * n == 0) return;
  dispatch(t, "global_avg_pool_grad", [&](auto tag) {
    using T = decltype(tag);
    global_avg_grad_kernel<T><<<blocks_for(planes * n), 256, 0, stream_of(c)>>>(BRAID_CT(dy), BRAID_T(dx), planes, n);
    BRAID_LAUNCH_CHECK("global_avg_grad_kernel");
  });
}

}  // namespace braid::cuda
