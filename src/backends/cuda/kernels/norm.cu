// layer_norm (+grad), rms_norm (+grad) and softmax (+grad), mirroring ops/defs/norm.cpp: statistics and the row sums of the
// backward in double, elementwise formulas evaluated in the same precision as the CPU kernel, so f32 results
// agree to a few ulps. One block per row; parameter gradients by deterministic two-stage column sums.
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunkRows = 64;

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t d, double eps) {
  int64_t r = blockIdx.x;
  const T* xr = x + r * d;
  double s = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += to_f(xr[j]);
  double m = block_sum(s) / static_cast<double>(d);
  double v = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double e = to_f(xr[j]) - m;
    v += e * e;
  }
  v = block_sum(v) / static_cast<double>(d);
  double rs = 1.0 / sqrt(v + eps);
  if (threadIdx.x == 0) {
    mean[r] = from_d<T>(m);
    rstd[r] = from_d<T>(rs);
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y[r * d + j] = from_d<T>((to_f(xr[j]) - m) * rs * static_cast<double>(to_f(w[j])) + static_cast<double>(to_f(b[j])));
}

template <typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                     int64_t d) {
  int64_t r = blockIdx.x;
  const T *xr = x + r * d, *dyr = dy + r * d;
  double m = to_f(mean[r]), rs = to_f(rstd[r]), sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double g = static_cast<double>(to_f(dyr[j])) * to_f(w[j]), xh = (to_f(xr[j]) - m) * rs;
    sg += g;
    sgx += g * xh;
  }
  sg = block_sum(sg) / static_cast<double>(d);
  sgx = block_sum(sgx) / static_cast<double>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double g = static_cast<double>(to_f(dyr[j])) * to_f(w[j]), xh = (to_f(xr[j]) - m) * rs;
    dx[r * d + j] = from_d<T>(rs * (g - sg - xh * sgx));
  }
}

// Stage 1: partial[chunk][j] = sums over the chunk's rows (in order) of dy * xhat and dy.
template <typename T>
__global__ void layer_norm_dwdb_partial(const T* dy, const T* x, const T* mean, const T* rstd, double* pw, double* pb,
                                        int64_t rows, int64_t d) {
  int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  int64_t chunk = blockIdx.y, r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  double sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    double g = to_f(dy[r * d + j]);
    sw += g * (to_f(x[r * d + j]) - static_cast<double>(to_f(mean[r]))) * static_cast<double>(to_f(rstd[r]));
    sb += g;
  }
  pw[chunk * d + j] = sw;
  pb[chunk * d + j] = sb;
}

template <typename T>
__global__ void chunk_finish(const double* p, T* out, int64_t chunks, int64_t d) {
  BRAID_GRID_LOOP(j, d) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += p[k * d + j];
    out[j] = from_d<T>(s);
  }
}

// rms_norm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), as rms_norm_rows of ops/defs/norm.cpp.
template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* w, T* y, T* rstd, int64_t d, double eps) {
  int64_t r = blockIdx.x;
  const T* xr = x + r * d;
  double s = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double v = to_f(xr[j]);
    s += v * v;
  }
  double rs = 1.0 / sqrt(block_sum(s) / static_cast<double>(d) + eps);
  if (threadIdx.x == 0) rstd[r] = from_d<T>(rs);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y[r * d + j] = from_d<T>(static_cast<double>(to_f(xr[j])) * rs * static_cast<double>(to_f(w[j])));
}

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
template <typename T>
__global__ void rms_norm_dx_kernel(const T* dy, const T* x, const T* w, const T* rstd, T* dx, int64_t d) {
  int64_t r = blockIdx.x;
  const T *xr = x + r * d, *dyr = dy + r * d;
  double rs = to_f(rstd[r]), sgx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    sgx += static_cast<double>(to_f(dyr[j])) * (to_f(xr[j]) * rs) * to_f(w[j]);
  sgx = block_sum(sgx) / static_cast<double>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double g = static_cast<double>(to_f(dyr[j])) * to_f(w[j]), xh = to_f(xr[j]) * rs;
    dx[r * d + j] = from_d<T>(rs * (g - xh * sgx));
  }
}

// Stage 1 of dweight: partial[chunk][j] = sum over the chunk's rows (in order) of dy * xhat.
template <typename T>
__global__ void rms_norm_dw_partial(const T* dy, const T* x, const T* rstd, double* pw, int64_t rows, int64_t d) {
  int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= d) return;
  int64_t chunk = blockIdx.y, r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  double sw = 0;
  for (int64_t r = r0; r < r1; ++r)
    sw += static_cast<double>(to_f(dy[r * d + j])) * (to_f(x[r * d + j]) * static_cast<double>(to_f(rstd[r])));
  pw[chunk * d + j] = sw;
}

template <typename T>
__global__ void softmax_rows(const T* x, T* y, int64_t n) {
  int64_t r = blockIdx.x;
  const T* xr = x + r * n;
  T* yr = y + r * n;
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, to_f(xr[k]));
  mx = block_max(mx);
  double s = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += expf(to_f(xr[k]) - mx);
  s = block_sum(s);
  float inv = static_cast<float>(1.0 / s);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] = from_f<T>(__fmul_rn(expf(to_f(xr[k]) - mx), inv));
}

template <typename T>
__global__ void softmax_lines(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  BRAID_GRID_LOOP(l, outer * inner) {
    int64_t base = (l / inner) * n * inner + l % inner;
    float mx = to_f(x[base]);
    for (int64_t k = 1; k < n; ++k) mx = fmaxf(mx, to_f(x[base + k * inner]));
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += expf(to_f(x[base + k * inner]) - mx);
    float inv = static_cast<float>(1.0 / s);
    for (int64_t k = 0; k < n; ++k)
      y[base + k * inner] = from_f<T>(__fmul_rn(expf(to_f(x[base + k * inner]) - mx), inv));
  }
}

template <typename T>
__global__ void softmax_grad_rows(const T* dy, const T* y, T* dx, int64_t n) {
  int64_t r = blockIdx.x;
  double s = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += static_cast<double>(to_f(dy[r * n + k])) * to_f(y[r * n + k]);
  s = block_sum(s);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    int64_t i = r * n + k;
    dx[i] = from_d<T>(static_cast<double>(to_f(y[i])) * (to_f(dy[i]) - s));
  }
}

template <typename T>
__global__ void softmax_grad_lines(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner) {
  BRAID_GRID_LOOP(l, outer * inner) {
    int64_t base = (l / inner) * n * inner + l % inner;
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += static_cast<double>(to_f(dy[base + k * inner])) * to_f(y[base + k * inner]);
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = base + k * inner;
      dx[i] = from_d<T>(static_cast<double>(to_f(y[i])) * (to_f(dy[i]) - s));
    }
  }
}

int64_t chunks_of(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

}  // namespace

void layer_norm(const Ctx& c, DType t, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                int64_t rows, int64_t d, double eps) {
  if (rows == 0) return;
  dispatch(t, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(rows), 128, 0, stream_of(c)>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y),
        static_cast<T*>(mean), static_cast<T*>(rstd), d, eps);
    BRAID_LAUNCH_CHECK("layer_norm_kernel");
  });
}

size_t layer_norm_grad_workspace(int64_t rows, int64_t d) {
  return static_cast<size_t>(2 * chunks_of(rows) * d) * sizeof(double);
}

void layer_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                     const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t d) {
  const int64_t chunks = chunks_of(rows);
  if (c.workspace_bytes < layer_norm_grad_workspace(rows, d))
    throw InternalError("layer_norm_grad: CUDA workspace of " + std::to_string(c.workspace_bytes) + " bytes, needs " +
                        std::to_string(layer_norm_grad_workspace(rows, d)));
  dispatch(t, "layer_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      layer_norm_dx_kernel<T><<<static_cast<unsigned>(rows), 128, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(mean),
          static_cast<const T*>(rstd), static_cast<T*>(dx), d);
      BRAID_LAUNCH_CHECK("layer_norm_dx_kernel");
    }
    auto* pw = static_cast<double*>(c.workspace);
    double* pb = pw + chunks * d;
    if (chunks > 0) {
      dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
      layer_norm_dwdb_partial<T><<<grid, kThreads, 0, stream_of(c)>>>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                                                       static_cast<const T*>(mean),
                                                                       static_cast<const T*>(rstd), pw, pb, rows, d);
      BRAID_LAUNCH_CHECK("layer_norm_dwdb_partial");
    }
    chunk_finish<T><<<blocks_for(d), kThreads, 0, stream_of(c)>>>(pw, static_cast<T*>(dw), chunks, d);
    chunk_finish<T><<<blocks_for(d), kThreads, 0, stream_of(c)>>>(pb, static_cast<T*>(db), chunks, d);
    BRAID_LAUNCH_CHECK("chunk_finish");
  });
}

void rms_norm(const Ctx& c, DType t, const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t d,
              double eps) {
  if (rows == 0) return;
  dispatch(t, "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<static_cast<unsigned>(rows), 128, 0, stream_of(c)>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), static_cast<T*>(rstd), d, eps);
    BRAID_LAUNCH_CHECK("rms_norm_kernel");
  });
}

size_t rms_norm_grad_workspace(int64_t rows, int64_t d) {
  return static_cast<size_t>(chunks_of(rows) * d) * sizeof(double);
}

void rms_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* rstd, void* dx,
                   void* dw, int64_t rows, int64_t d) {
  const int64_t chunks = chunks_of(rows);
  if (c.workspace_bytes < rms_norm_grad_workspace(rows, d))
    throw InternalError("rms_norm_grad: CUDA workspace of " + std::to_string(c.workspace_bytes) + " bytes, needs " +
                        std::to_string(rms_norm_grad_workspace(rows, d)));
  dispatch(t, "rms_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      rms_norm_dx_kernel<T><<<static_cast<unsigned>(rows), 128, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(rstd),
          static_cast<T*>(dx), d);
      BRAID_LAUNCH_CHECK("rms_norm_dx_kernel");
    }
    auto* pw = static_cast<double*>(c.workspace);
    if (chunks > 0) {
      dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
      rms_norm_dw_partial<T><<<grid, kThreads, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(rstd), pw, rows, d);
      BRAID_LAUNCH_CHECK("rms_norm_dw_partial");
    }
    chunk_finish<T><<<blocks_for(d), kThreads, 0, stream_of(c)>>>(pw, static_cast<T*>(dw), chunks, d);
    BRAID_LAUNCH_CHECK("chunk_finish");
  });
}

void softmax(const Ctx& c, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner) {
  if (outer * n * inner == 0) return;
  dispatch(t, "softmax", [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1)
      softmax_rows<T><<<static_cast<unsigned>(outer), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(x),
                                                                                   static_cast<T*>(y), n);
    else
      softmax_lines<T><<<blocks_for(outer * inner), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(x),
                                                                                 static_cast<T*>(y), outer, n, inner);
    BRAID_LAUNCH_CHECK("softmax");
  });
}

void softmax_grad(const Ctx& c, DType t, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                  int64_t inner) {
  if (outer * n * inner == 0) return;
  dispatch(t, "softmax_grad", [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1)
      softmax_grad_rows<T><<<static_cast<unsigned>(outer), kThreads, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), n);
    else
      softmax_grad_lines<T><<<blocks_for(outer * inner), kThreads, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), outer, n, inner);
    BRAID_LAUNCH_CHECK("softmax_grad");
  });
}

}  // namespace braid::cuda
