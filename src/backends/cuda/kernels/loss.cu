// cross_entropy (+grad), mse_loss (+grad) and accuracy, mirroring ops/defs/loss.cpp: per-position terms in
// double into the workspace, then summed in position order by one thread (as the CPU), so the scalar is
// deterministic and equal to the CPU's to ~1 ulp. A target outside [0, C) sets kBadTarget in the error flag
// (the executor raises the CPU's UserError) and its row yields NaN; it is never read out of bounds.
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void ce_rows(const T* x, const void* tg, bool i64, double* row_loss, int64_t c, int* flag) {
  int64_t r = blockIdx.x;
  const T* xr = x + r * c;
  float mxf = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) mxf = fmaxf(mxf, to_f(xr[j]));
  double mx = block_max(mxf);
  double s = 0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += exp(static_cast<double>(to_f(xr[j])) - mx);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    int64_t t = load_id(tg, i64, r);
    if (t < 0 || t >= c) {
      atomicOr(flag, kBadTarget);
      row_loss[r] = NAN;
    } else {
      row_loss[r] = mx + log(s) - static_cast<double>(to_f(xr[t]));
    }
  }
}

template <typename T>
__global__ void mean_of(const double* v, int64_t n, double div, T* out) {
  double total = 0;
  for (int64_t r = 0; r < n; ++r) total += v[r];
  out[0] = from_d<T>(total / div);
}

template <typename T>
__global__ void ce_grad_rows(const float* dloss, const T* x, const void* tg, bool i64, T* dx, int64_t n, int64_t c,
                             int* flag) {
  int64_t r = blockIdx.x;
  const T* xr = x + r * c;
  T* dr = dx + r * c;
  double scale = static_cast<double>(to_f(dloss[0])) / static_cast<double>(n);
  float mxf = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) mxf = fmaxf(mxf, to_f(xr[j]));
  double mx = block_max(mxf);
  double s = 0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += exp(static_cast<double>(to_f(xr[j])) - mx);
  s = block_sum(s);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dr[j] = from_d<T>(exp(static_cast<double>(to_f(xr[j])) - mx) / s * scale);
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t t = load_id(tg, i64, r);
    if (t < 0 || t >= c) atomicOr(flag, kBadTarget);
    else dr[t] = from_d<T>(static_cast<double>(to_f(dr[t])) - scale);
  }
}

template <typename T>
__global__ void mse_rows(const T* a, const T* b, double* row_sum, int64_t m) {
  int64_t r = blockIdx.x;
  double s = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    double e = static_cast<double>(to_f(a[r * m + j])) - to_f(b[r * m + j]);
    s += e * e;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) row_sum[r] = s;
}

template <typename T>
__global__ void mse_grad_kernel(const T* dloss, const T* a, const T* b, T* da, T* db, int64_t n) {
  double scale = 2.0 * static_cast<double>(to_f(dloss[0])) / static_cast<double>(n);
  BRAID_GRID_LOOP(i, n) {
    T g = from_d<T>((static_cast<double>(to_f(a[i])) - to_f(b[i])) * scale);
    da[i] = g;
    db[i] = from_f<T>(-to_f(g));
  }
}

template <typename T>
__global__ void accuracy_rows(const T* x, const void* tg, bool i64, double* hit, int64_t n, int64_t c) {
  BRAID_GRID_LOOP(r, n) {
    const T* xr = x + r * c;
    int64_t best = 0;
    float bv = to_f(xr[0]);
    for (int64_t j = 1; j < c; ++j) {
      float v = to_f(xr[j]);
      if (v > bv) {
        bv = v;
        best = j;
      }
    }
    hit[r] = best == load_id(tg, i64, r) ? 1.0 : 0.0;
  }
}

double* doubles(const Ctx& c, int64_t n, const char* what) {
  if (c.workspace_bytes < static_cast<size_t>(n) * sizeof(double))
    throw InternalError(std::string(what) + ": CUDA workspace of " + std::to_string(c.workspace_bytes) +
                        " bytes, needs " + std::to_string(n * 8));
  return static_cast<double*>(c.workspace);
}

}  // namespace

void cross_entropy(const Ctx& c, DType t, const void* logits, const void* targets, bool targets_i64, void* loss,
                   int64_t n, int64_t classes) {
  double* rows = doubles(c, n, "cross_entropy");
  dispatch(t, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      ce_rows<T><<<static_cast<unsigned>(n), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(logits), targets,
                                                                           targets_i64, rows, classes, c.error_flag);
      BRAID_LAUNCH_CHECK("ce_rows");
    }
    // f32 for f32 and for bf16 logits (the op's loss is master_dtype(logits))
    mean_of<float><<<1, 1, 0, stream_of(c)>>>(rows, n, static_cast<double>(n), static_cast<float*>(loss));
    BRAID_LAUNCH_CHECK("mean_of");
  });
}

void cross_entropy_grad(const Ctx& c, DType t, const void* dloss, const void* logits, const void* targets,
                        bool targets_i64, void* dx, int64_t n, int64_t classes) {
  if (n == 0) return;
  dispatch(t, "cross_entropy_grad", [&](auto tag) {
    using T = decltype(tag);
    ce_grad_rows<T><<<static_cast<unsigned>(n), kThreads, 0, stream_of(c)>>>(
        static_cast<const float*>(dloss), static_cast<const T*>(logits), targets, targets_i64, static_cast<T*>(dx), n,
        classes, c.error_flag);
    BRAID_LAUNCH_CHECK("ce_grad_rows");
  });
}

void mse(const Ctx& c, DType t, const void* a, const void* b, void* loss, int64_t rows, int64_t m) {
  double* sums = doubles(c, rows, "mse_loss");
  dispatch(t, "mse_loss", [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      mse_rows<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(a),
                                                                               static_cast<const T*>(b), sums, m);
      BRAID_LAUNCH_CHECK("mse_rows");
    }
    mean_of<T><<<1, 1, 0, stream_of(c)>>>(sums, rows, static_cast<double>(rows * m), static_cast<T*>(loss));
    BRAID_LAUNCH_CHECK("mean_of");
  });
}

void mse_grad(const Ctx& c, DType t, const void* dloss, const void* a, const void* b, void* da, void* db, int64_t n) {
  if (n == 0) return;
  dispatch(t, "mse_loss_grad", [&](auto tag) {
    using T = decltype(tag);
    mse_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(dloss),
                                                                      static_cast<const T*>(a), static_cast<const T*>(b),
                                                                      static_cast<T*>(da), static_cast<T*>(db), n);
    BRAID_LAUNCH_CHECK("mse_grad_kernel");
  });
}

void accuracy(const Ctx& c, DType t, const void* logits, const void* targets, bool targets_i64, float* out, int64_t n,
              int64_t classes) {
  double* hit = doubles(c, n, "accuracy");
  dispatch(t, "accuracy", [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      accuracy_rows<T><<<blocks_for(n), kThreads, 0, stream_of(c)>>>(static_cast<const T*>(logits), targets,
                                                                      targets_i64, hit, n, classes);
      BRAID_LAUNCH_CHECK("accuracy_rows");
    }
    mean_of<float><<<1, 1, 0, stream_of(c)>>>(hit, n, static_cast<double>(n), out);
    BRAID_LAUNCH_CHECK("mean_of");
  });
}

}  // namespace braid::cuda
