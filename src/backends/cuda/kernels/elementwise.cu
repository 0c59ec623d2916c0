// Elementwise kernels: n-ary add/mul with broadcasting, reduce_like, fill, activations and their
// gradients (PyTorch's formulas, as ops/defs/elementwise.cpp), dropout (core/rng.h's hash, so masks equal
// the CPU's bit for bit), gradient accumulation and f32 <-> bf16 / f16 casts. Math in fp32 for both dtypes.
#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

struct NaryArgs {
  const void* x[4];
  BcastIndex idx[4];
  int count;
  bool first;  // y = fold(x) (else y = y op fold(x))
};

__device__ inline int64_t bcast_offset(const BcastIndex& b, int64_t i) {
  int64_t off = 0;
  for (int k = b.rank - 1; k >= 0; --k) {
    int64_t d = b.dims[k];
    off += (i % d) * b.strides[k];
    i /= d;
  }
  return off;
}

template <typename T, bool kMul>
__global__ void nary_kernel(NaryArgs a, T* y, int64_t n) {
  BRAID_GRID_LOOP(i, n) {
    float acc = a.first ? 0.f : to_f(y[i]);
    for (int k = 0; k < a.count; ++k) {
      float v = to_f(static_cast<const T*>(a.x[k])[bcast_offset(a.idx[k], i)]);
      if (a.first && k == 0) acc = v;
      else acc = kMul ? __fmul_rn(acc, v) : __fadd_rn(acc, v);
    }
    y[i] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void reduce_like_kernel(const T* g, ReduceIndex r, T* y, int64_t n_out) {
  BRAID_GRID_LOOP(o, n_out) {
    int64_t base = 0, rem = o;
    for (int k = r.kept_rank - 1; k >= 0; --k) {
      base += (rem % r.kept_dims[k]) * r.kept_strides[k];
      rem /= r.kept_dims[k];
    }
    float acc = 0.f;
    for (int64_t j = 0; j < r.red_count; ++j) {  // row-major over the reduced axes: increasing input index
      int64_t off = 0, q = j;
      for (int k = r.red_rank - 1; k >= 0; --k) {
        off += (q % r.red_dims[k]) * r.red_strides[k];
        q /= r.red_dims[k];
      }
      acc = __fadd_rn(acc, to_f(g[base + off]));
    }
    y[o] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void fill_kernel(T* y, int64_t n, float v) {
  BRAID_GRID_LOOP(i, n) y[i] = from_f<T>(v);
}

// CUDA's math for the activation list's formulas (ops/activation.h), in float.
struct DevMath {
  __host__ __device__ static float exp(float x) { return expf(x); }
  __host__ __device__ static float tanh(float x) { return tanhf(x); }
  __host__ __device__ static float erf(float x) { return erff(x); }
};

template <Act K, typename T>
__global__ void act_kernel(const T* x, T* y, int64_t n) {
  BRAID_GRID_LOOP(i, n) y[i] = from_f<T>(ops::ActMath<K>::template fwd<DevMath>(to_f(x[i])));
}

template <Act K, typename T>
__global__ void act_grad_kernel(const T* dy, const T* z, T* dx, int64_t n) {
  BRAID_GRID_LOOP(i, n) dx[i] = from_f<T>(to_f(dy[i]) * ops::ActMath<K>::template deriv<DevMath>(to_f(z[i])));
}

template <typename T, typename M>
__global__ void dropout_kernel(const T* x, T* y, M* mask, int64_t n, double p, bool active, uint64_t key,
                               ShardIndex ix, float scale) {
  BRAID_GRID_LOOP(i, n) {
    float m = 1.f;
    if (active) {
      uint64_t at = ix.base + static_cast<uint64_t>(i);
      if (ix.len > 0) {
        const int64_t k = i % ix.inner, t = (i / ix.inner) % ix.len, row = i / (ix.inner * ix.len);
        at = static_cast<uint64_t>(((ix.row0 + row) * ix.full + ix.start + t) * ix.inner + k);
      }
      m = uniform_at(key, at) >= p ? scale : 0.f;
    }
    if (mask) mask[i] = from_f<M>(m);  // null: not kept (dropout's forward and its gradient draw it again)
    y[i] = from_f<T>(__fmul_rn(to_f(x[i]), m));
  }
}

template <typename T>
__global__ void axpy_kernel(const T* s, T* d, int64_t n, float k, bool first, bool unit) {
  BRAID_GRID_LOOP(i, n) {
    float v = unit ? to_f(s[i]) : __fmul_rn(to_f(s[i]), k);
    d[i] = from_f<T>(first ? v : __fadd_rn(to_f(d[i]), v));
  }
}

template <typename A, typename B>
__global__ void cast_kernel(const A* x, B* y, int64_t n) {
  BRAID_GRID_LOOP(i, n) y[i] = from_f<B>(to_f(x[i]));
}

}  // namespace

void nary(const Ctx& c, DType t, bool mul, int num_in, const void* const* x, const BcastIndex* idx, void* y, int64_t n) {
  if (n == 0) return;
  dispatch(t, mul ? "mul" : "add", [&](auto tag) {
    using T = decltype(tag);
    for (int start = 0; start < num_in; start += 4) {  // four operands per launch, folded left to right
      NaryArgs a{};
      a.count = num_in - start < 4 ? num_in - start : 4;
      a.first = start == 0;
      for (int k = 0; k < a.count; ++k) {
        a.x[k] = x[start + k];
        a.idx[k] = idx[start + k];
      }
      if (mul) nary_kernel<T, true><<<blocks_for(n), 256, 0, stream_of(c)>>>(a, static_cast<T*>(y), n);
      else nary_kernel<T, false><<<blocks_for(n), 256, 0, stream_of(c)>>>(a, static_cast<T*>(y), n);
      BRAID_LAUNCH_CHECK("nary_kernel");
    }
  });
}

void reduce_like(const Ctx& c, DType t, const void* g, const ReduceIndex& r, void* y, int64_t n_out) {
  if (n_out == 0) return;
  dispatch(t, "reduce_like", [&](auto tag) {
    using T = decltype(tag);
    reduce_like_kernel<T><<<blocks_for(n_out), 256, 0, stream_of(c)>>>(static_cast<const T*>(g), r,
                                                                         static_cast<T*>(y), n_out);
    BRAID_LAUNCH_CHECK("reduce_like_kernel");
  });
}

void fill(const Ctx& c, DType t, void* y, int64_t n, double value) {
  if (n == 0) return;
  dispatch(t, "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<T*>(y), n, static_cast<float>(value));
    BRAID_LAUNCH_CHECK("fill_kernel");
  });
}

void activation(const Ctx& c, DType t, Act a, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  dispatch(t, "activation", [&](auto tag) {
    using T = decltype(tag);
    ops::with_act(a, [&](auto k) {
      act_kernel<decltype(k)::value, T>
          <<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
    });
    BRAID_LAUNCH_CHECK("act_kernel");
  });
}

void activation_grad(const Ctx& c, DType t, Act a, const void* dy, const void* z, void* dx, int64_t n) {
  if (n == 0) return;
  dispatch(t, "activation_grad", [&](auto tag) {
    using T = decltype(tag);
    ops::with_act(a, [&](auto k) {
      act_grad_kernel<decltype(k)::value, T><<<blocks_for(n), 256, 0, stream_of(c)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(z), static_cast<T*>(dx), n);
    });
    BRAID_LAUNCH_CHECK("act_grad_kernel");
  });
}

void dropout(const Ctx& c, DType t, const void* x, void* y, void* mask, DType mask_t, int64_t n, double p,
             bool active, uint64_t key, const ShardIndex& base) {
  if (n == 0) return;
  if (mask_t != t && mask_t != DType::f32)
    throw InternalError("dropout of " + std::string(dtype_name(t)) + " values with a " +
                        std::string(dtype_name(mask_t)) + " mask");
  dispatch(t, "dropout", [&](auto tag) {
    using T = decltype(tag);
    // The CPU computes the scale as T(1 / (1 - p)) in double, then rounds to T (f32: the mask of 16-bit values).
    float scale = static_cast<float>(1.0 / (1.0 - p));
    if (mask_t == t)
      dropout_kernel<T, T><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                     static_cast<T*>(mask), n, p, active, key, base, scale);
    else
      dropout_kernel<T, float><<<blocks_for(n), 256, 0, stream_of(c)>>>(
          static_cast<const T*>(x), static_cast<T*>(y), static_cast<float*>(mask), n, p, active, key, base, scale);
    BRAID_LAUNCH_CHECK("dropout_kernel");
  });
}

void axpy(const Ctx& c, DType t, const void* src, void* dst, int64_t n, double scale, bool first) {
  if (n == 0) return;
  dispatch(t, "axpy", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const T*>(src), static_cast<T*>(dst), n,
                                                             static_cast<float>(scale), first, scale == 1.0);
    BRAID_LAUNCH_CHECK("axpy_kernel");
  });
}

void cast(const Ctx& c, DType from, const void* x, DType to, void* y, int64_t n) {
  if (n == 0) return;
  if (from == DType::f32 && to == DType::bf16)
    cast_kernel<float, bf16><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const float*>(x),
                                                                       static_cast<bf16*>(y), n);
  else if (from == DType::bf16 && to == DType::f32)
    cast_kernel<bf16, float><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const bf16*>(x),
                                                                       static_cast<float*>(y), n);
  else if (from == DType::f32 && to == DType::f16)
    cast_kernel<float, f16><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const float*>(x),
                                                                      static_cast<f16*>(y), n);
  else if (from == DType::f16 && to == DType::f32)
    cast_kernel<f16, float><<<blocks_for(n), 256, 0, stream_of(c)>>>(static_cast<const f16*>(x),
                                                                      static_cast<float*>(y), n);
  else
    throw InternalError(std::string("cast from ") + std::string(dtype_name(from)) + " to " +
                        std::string(dtype_name(to)) + " is not implemented on GPU");
  BRAID_LAUNCH_CHECK("cast_kernel");
}

}  // namespace braid::cuda
