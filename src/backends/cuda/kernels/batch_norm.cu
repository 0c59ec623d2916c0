// batch_norm (+grad) and the synchronised batch-norm ops of ops/defs/batch_norm.cpp: one block per channel,
// statistics and sums in double (tree order inside a block, fixed: deterministic), running statistics
// updated by the channel's block, num_batches_tracked incremented by block 0. x viewed as (B, C, S).
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline int64_t at(int64_t b, int64_t c, int64_t C, int64_t S) { return (b * C + c) * S; }

template <typename T>
__device__ double channel_sum(const T* x, int64_t c, int64_t B, int64_t C, int64_t S) {
  double s = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = threadIdx.x; e < S; e += blockDim.x) s += to_f(x[at(b, c, C, S) + e]);
  return block_sum(s);
}

template <typename T>
__device__ double channel_sqdev(const T* x, double m, int64_t c, int64_t B, int64_t C, int64_t S) {
  double s = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = threadIdx.x; e < S; e += blockDim.x) {
      double d = to_f(x[at(b, c, C, S) + e]) - m;
      s += d * d;
    }
  return block_sum(s);
}

__device__ inline void bump(void* nbt, bool i64) {
  if (i64) ++*static_cast<int64_t*>(nbt);
  else ++*static_cast<int32_t*>(nbt);
}

template <typename T>
__device__ void normalise(const T* x, T* y, double m, double inv, const T* w, const T* b, int64_t c, int64_t B,
                          int64_t C, int64_t S) {
  const double scale = to_f(w[c]) * inv, shift = to_f(b[c]) - m * scale;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t e = threadIdx.x; e < S; e += blockDim.x) {
      int64_t i = at(bi, c, C, S) + e;
      y[i] = from_d<T>(to_f(x[i]) * scale + shift);
    }
}

template <typename T>
__global__ void bn_kernel(const T* x, const T* w, const T* b, T* rm, T* rv, void* nbt, bool nbt_i64, T* y, T* mean,
                          T* invstd, int64_t B, int64_t C, int64_t S, double eps, double mom, bool train) {
  int64_t c = blockIdx.x;
  const double n = static_cast<double>(B * S);
  double m, inv;
  if (train) {
    m = channel_sum(x, c, B, C, S) / n;
    double sq = channel_sqdev(x, m, c, B, C, S);
    inv = 1.0 / sqrt(sq / n + eps);
    if (threadIdx.x == 0) {
      double unbiased = n > 1 ? sq / (n - 1) : 0.0;
      rm[c] = from_d<T>((1 - mom) * static_cast<double>(to_f(rm[c])) + mom * m);
      rv[c] = from_d<T>((1 - mom) * static_cast<double>(to_f(rv[c])) + mom * unbiased);
      if (c == 0) bump(nbt, nbt_i64);
    }
  } else {
    m = to_f(rm[c]);
    inv = 1.0 / sqrt(static_cast<double>(to_f(rv[c])) + eps);
  }
  if (threadIdx.x == 0) {
    mean[c] = from_d<T>(m);
    invstd[c] = from_d<T>(inv);
  }
  normalise(x, y, m, inv, w, b, c, B, C, S);
}

// Sums of dy and dy * xhat over channel c.
template <typename T>
__device__ void grad_sums(const T* dy, const T* x, double m, double inv, int64_t c, int64_t B, int64_t C, int64_t S,
                          double* sdy, double* sdyx) {
  double a = 0, b = 0;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t e = threadIdx.x; e < S; e += blockDim.x) {
      int64_t i = at(bi, c, C, S) + e;
      double g = to_f(dy[i]);
      a += g;
      b += g * (to_f(x[i]) - m) * inv;
    }
  *sdy = block_sum(a);
  *sdyx = block_sum(b);
}

template <typename T>
__device__ void grad_dx(const T* dy, const T* x, T* dx, double k, double m, double inv, double sdy, double sdyx,
                        double n, bool train, int64_t c, int64_t B, int64_t C, int64_t S) {
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t e = threadIdx.x; e < S; e += blockDim.x) {
      int64_t i = at(bi, c, C, S) + e;
      double g = to_f(dy[i]);
      if (train) g -= (sdy + (to_f(x[i]) - m) * inv * sdyx) / n;
      dx[i] = from_d<T>(k * g);
    }
}

template <typename T>
__global__ void bn_grad_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* invstd, T* dx, T* dw, T* db,
                               int64_t B, int64_t C, int64_t S, bool train) {
  int64_t c = blockIdx.x;
  const double m = to_f(mean[c]), inv = to_f(invstd[c]);
  double sdy, sdyx;
  grad_sums(dy, x, m, inv, c, B, C, S, &sdy, &sdyx);
  if (threadIdx.x == 0) {
    db[c] = from_d<T>(sdy);
    dw[c] = from_d<T>(sdyx);
  }
  grad_dx(dy, x, dx, to_f(w[c]) * inv, m, inv, sdy, sdyx, static_cast<double>(B * S), train, c, B, C, S);
}

template <typename T>
__global__ void sync_sum_kernel(const T* x, double* s, int64_t B, int64_t C, int64_t S) {
  double v = channel_sum(x, blockIdx.x, B, C, S);
  if (threadIdx.x == 0) s[blockIdx.x] = v;
}

template <typename T>
__global__ void sync_sqdev_kernel(const T* x, const double* s1, double* s2, int64_t B, int64_t C, int64_t S,
                                  double total) {
  double v = channel_sqdev(x, s1[blockIdx.x] / total, blockIdx.x, B, C, S);
  if (threadIdx.x == 0) s2[blockIdx.x] = v;
}

template <typename T>
__global__ void sync_apply_kernel(const T* x, const double* s1, const double* s2, const T* w, const T* b, T* rm, T* rv,
                                  void* nbt, bool nbt_i64, T* y, T* mean, T* invstd, int64_t B, int64_t C, int64_t S,
                                  double eps, double mom, double total) {
  int64_t c = blockIdx.x;
  const double m = s1[c] / total, inv = 1.0 / sqrt(s2[c] / total + eps);
  if (threadIdx.x == 0) {
    const double unbiased = total > 1 ? s2[c] / (total - 1) : 0.0;
    rm[c] = from_d<T>((1 - mom) * static_cast<double>(to_f(rm[c])) + mom * m);
    rv[c] = from_d<T>((1 - mom) * static_cast<double>(to_f(rv[c])) + mom * unbiased);
    mean[c] = from_d<T>(m);
    invstd[c] = from_d<T>(inv);
    if (c == 0) bump(nbt, nbt_i64);
  }
  normalise(x, y, m, inv, w, b, c, B, C, S);
}

template <typename T>
__global__ void sync_grad_sums_kernel(const T* dy, const T* x, const T* mean, const T* invstd, double* sums, int64_t B,
                                      int64_t C, int64_t S) {
  int64_t c = blockIdx.x;
  double sdy, sdyx;
  grad_sums(dy, x, static_cast<double>(to_f(mean[c])), static_cast<double>(to_f(invstd[c])), c, B, C, S, &sdy, &sdyx);
  if (threadIdx.x == 0) {
    sums[c] = sdy;
    sums[C + c] = sdyx;
  }
}

template <typename T>
__global__ void sync_grad_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* invstd,
                                 const double* local, const double* global, T* dx, T* dw, T* db, int64_t B, int64_t C,
                                 int64_t S, double total) {
  int64_t c = blockIdx.x;
  const double m = to_f(mean[c]), inv = to_f(invstd[c]);
  if (threadIdx.x == 0) {
    db[c] = from_d<T>(local[c]);
    dw[c] = from_d<T>(local[C + c]);
  }
  grad_dx(dy, x, dx, to_f(w[c]) * inv, m, inv, global[c], global[C + c], total, true, c, B, C, S);
}

}  // namespace

#define BRAID_T(p) static_cast<T*>(p)
#define BRAID_CT(p) static_cast<const T*>(p)
#define BRAID_CHANNELS static_cast<unsigned>(C), kThreads, 0, stream_of(c)

void batch_norm(const Ctx& c, DType t, const void* x, const void* w, const void* b, void* rm, void* rv, void* nbt,
                bool nbt_i64, void* y, void* mean, void* invstd, int64_t B, int64_t C, int64_t S, double eps,
                double momentum, bool training) {
  if (C == 0) return;
  dispatch(t, "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    bn_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(x), BRAID_CT(w), BRAID_CT(b), BRAID_T(rm), BRAID_T(rv), nbt, nbt_i64,
                                     BRAID_T(y), BRAID_T(mean), BRAID_T(invstd), B, C, S, eps, momentum, training);
    BRAID_LAUNCH_CHECK("bn_kernel");
  });
}

void batch_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                     const void* invstd, void* dx, void* dw, void* db, int64_t B, int64_t C, int64_t S, bool training) {
  if (C == 0) return;
  dispatch(t, "batch_norm_grad", [&](auto tag) {
    using T = decltype(tag);
    bn_grad_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(dy), BRAID_CT(x), BRAID_CT(w), BRAID_CT(mean), BRAID_CT(invstd),
                                          BRAID_T(dx), BRAID_T(dw), BRAID_T(db), B, C, S, training);
    BRAID_LAUNCH_CHECK("bn_grad_kernel");
  });
}

void bn_sync_sum(const Ctx& c, DType t, const void* x, double* s, int64_t B, int64_t C, int64_t S) {
  if (C == 0) return;
  dispatch(t, "bn_sync_sum", [&](auto tag) {
    using T = decltype(tag);
    sync_sum_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(x), s, B, C, S);
    BRAID_LAUNCH_CHECK("sync_sum_kernel");
  });
}

void bn_sync_sqdev(const Ctx& c, DType t, const void* x, const double* s1, double* s2, int64_t B, int64_t C,
                   int64_t S, double total) {
  if (C == 0) return;
  dispatch(t, "bn_sync_sqdev", [&](auto tag) {
    using T = decltype(tag);
    sync_sqdev_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(x), s1, s2, B, C, S, total);
    BRAID_LAUNCH_CHECK("sync_sqdev_kernel");
  });
}

void bn_sync_apply(const Ctx& c, DType t, const void* x, const double* s1, const double* s2, const void* w,
                   const void* b, void* rm, void* rv, void* nbt, bool nbt_i64, void* y, void* mean, void* invstd,
                   int64_t B, int64_t C, int64_t S, double eps, double momentum, double total) {
  if (C == 0) return;
  dispatch(t, "bn_sync_apply", [&](auto tag) {
    using T = decltype(tag);
    sync_apply_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(x), s1, s2, BRAID_CT(w), BRAID_CT(b), BRAID_T(rm), BRAID_T(rv),
                                             nbt, nbt_i64, BRAID_T(y), BRAID_T(mean), BRAID_T(invstd), B, C, S, eps,
                                             momentum, total);
    BRAID_LAUNCH_CHECK("sync_apply_kernel");
  });
}

void bn_sync_grad_sums(const Ctx& c, DType t, const void* dy, const void* x, const void* mean, const void* invstd,
                       double* sums, int64_t B, int64_t C, int64_t S) {
  if (C == 0) return;
  dispatch(t, "bn_sync_grad_sums", [&](auto tag) {
    using T = decltype(tag);
    sync_grad_sums_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(dy), BRAID_CT(x), BRAID_CT(mean), BRAID_CT(invstd), sums, B,
                                                 C, S);
    BRAID_LAUNCH_CHECK("sync_grad_sums_kernel");
  });
}

void bn_sync_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                  const void* invstd, const double* local, const double* global, void* dx, void* dw, void* db,
                  int64_t B, int64_t C, int64_t S, double total) {
  if (C == 0) return;
  dispatch(t, "bn_sync_grad", [&](auto tag) {
    using T = decltype(tag);
    sync_grad_kernel<T><<<BRAID_CHANNELS>>>(BRAID_CT(dy), BRAID_CT(x), BRAID_CT(w), BRAID_CT(mean), BRAID_CT(invstd),
                                            local, global, BRAID_T(dx), BRAID_T(dw), BRAID_T(db), B, C, S, total);
    BRAID_LAUNCH_CHECK("sync_grad_kernel");
  });
}

}  // namespace braid::cuda
