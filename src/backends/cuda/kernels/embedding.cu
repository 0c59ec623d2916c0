// embedding / position_embedding and their table gradients, mirroring ops/defs/embedding.cpp. The table
// gradients are deterministic without float atomics: embedding_dw sorts token positions stably by id (CUB
// radix sort) and sums each id's dy rows in token order, the CPU's order, so results are bit-identical;
// position_embedding_dw sums over the batch in order. A token outside [0, num) sets kBadToken in the error
// flag (the executor raises the CPU's UserError); it is never read or written out of bounds.
#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

template <typename T>
__global__ void gather_rows(const void* tok, bool i64, const T* w, T* y, int64_t n, int64_t num, int64_t dim,
                            int* flag) {
  BRAID_GRID_LOOP(e, n * dim) {
    int64_t i = e / dim, j = e % dim, t = load_id(tok, i64, i);
    if (t < 0 || t >= num) {
      if (j == 0) atomicOr(flag, kBadToken);
      y[e] = from_f<T>(0.f);
    } else {
      y[e] = w[t * dim + j];
    }
  }
}

__global__ void make_keys(const void* tok, bool i64, int32_t* keys, int32_t* vals, int64_t n, int64_t num, int* flag) {
  BRAID_GRID_LOOP(i, n) {
    int64_t t = load_id(tok, i64, i);
    if (t < 0 || t >= num) {
      atomicOr(flag, kBadToken);
      t = num;  // sorts after every valid id; skipped by the sum
    }
    keys[i] = static_cast<int32_t>(t);
    vals[i] = static_cast<int32_t>(i);
  }
}

// One block per sorted position s that starts a run of equal ids: dw[id, :] = sum of dy rows in token order.
template <typename T>
__global__ void segment_rows(const int32_t* keys, const int32_t* vals, const T* dy, T* dw, int64_t n, int64_t num,
                             int64_t dim) {
  int64_t s = blockIdx.x;
  int32_t id = keys[s];
  if (id >= num || (s > 0 && keys[s - 1] == id)) return;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float acc = 0.f;
    for (int64_t q = s; q < n && keys[q] == id; ++q) acc = __fadd_rn(acc, to_f(dy[static_cast<int64_t>(vals[q]) * dim + j]));
    dw[static_cast<int64_t>(id) * dim + j] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void add_positions(const T* x, const T* w, T* y, int64_t bt, int64_t seq, int64_t d) {
  BRAID_GRID_LOOP(e, bt * d) {
    int64_t r = e / d, j = e % d;
    y[e] = from_f<T>(__fadd_rn(to_f(x[e]), to_f(w[(r % seq) * d + j])));
  }
}

template <typename T>
__global__ void position_dw_kernel(const T* dy, T* dw, int64_t nb, int64_t seq, int64_t d, int64_t rows) {
  BRAID_GRID_LOOP(e, rows * d) {
    int64_t t = e / d, j = e % d;
    float acc = 0.f;
    if (t < seq)
      for (int64_t b = 0; b < nb; ++b) acc = __fadd_rn(acc, to_f(dy[(b * seq + t) * d + j]));
    dw[e] = from_f<T>(acc);
  }
}

int end_bit(int64_t num) {
  int bits = 1;
  while ((int64_t{1} << bits) <= num) ++bits;  // id `num` (invalid tokens) must fit too
  return bits;
}

size_t sort_temp_bytes(int64_t n, int64_t num) {
  size_t bytes = 0;
  BRAID_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, end_bit(num)));
  return bytes;
}

}  // namespace

void embedding(const Ctx& c, DType t, const void* tokens, bool tokens_i64, const void* w, void* y, int64_t n,
               int64_t num, int64_t dim) {
  if (n * dim == 0) return;
  dispatch(t, "embedding", [&](auto tag) {
    using T = decltype(tag);
    gather_rows<T><<<blocks_for(n * dim), 256, 0, stream_of(c)>>>(tokens, tokens_i64, static_cast<const T*>(w),
                                                                   static_cast<T*>(y), n, num, dim, c.error_flag);
    BRAID_LAUNCH_CHECK("gather_rows");
  });
}

size_t embedding_dw_workspace(int64_t n, int64_t num) {
  return static_cast<size_t>(4 * n) * sizeof(int32_t) + 256 + sort_temp_bytes(n, num);
}

void embedding_dw(const Ctx& c, DType t, const void* dy, const void* tokens, bool tokens_i64, void* dw, int64_t n,
                  int64_t num, int64_t dim) {
  BRAID_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(num * dim) * (t == DType::f32 ? 4 : 2), stream_of(c)));
  if (n == 0 || dim == 0) return;
  size_t need = embedding_dw_workspace(n, num);
  if (c.workspace_bytes < need)
    throw InternalError("embedding_dw: CUDA workspace of " + std::to_string(c.workspace_bytes) + " bytes, needs " +
                        std::to_string(need));
  auto* keys_in = static_cast<int32_t*>(c.workspace);
  int32_t *keys_out = keys_in + n, *vals_in = keys_out + n, *vals_out = vals_in + n;
  void* temp = reinterpret_cast<char*>(c.workspace) + ((static_cast<size_t>(4 * n) * 4 + 255) / 256 * 256);
  size_t temp_bytes = sort_temp_bytes(n, num);
  make_keys<<<blocks_for(n), 256, 0, stream_of(c)>>>(tokens, tokens_i64, keys_in, vals_in, n, num, c.error_flag);
  BRAID_LAUNCH_CHECK("make_keys");
  // LSD radix sort is stable: equal ids keep their token order.
  BRAID_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                                   static_cast<int>(n), 0, end_bit(num), stream_of(c)));
  dispatch(t, "embedding_dw", [&](auto tag) {
    using T = decltype(tag);
    segment_rows<T><<<static_cast<unsigned>(n), 128, 0, stream_of(c)>>>(keys_out, vals_out, static_cast<const T*>(dy),
                                                                        static_cast<T*>(dw), n, num, dim);
    BRAID_LAUNCH_CHECK("segment_rows");
  });
}

void position_embedding(const Ctx& c, DType t, const void* x, const void* w, void* y, int64_t batch, int64_t seq,
                        int64_t d) {
  if (batch * seq * d == 0) return;
  dispatch(t, "position_embedding", [&](auto tag) {
    using T = decltype(tag);
    add_positions<T><<<blocks_for(batch * seq * d), 256, 0, stream_of(c)>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), batch * seq, seq, d);
    BRAID_LAUNCH_CHECK("add_positions");
  });
}

void position_embedding_dw(const Ctx& c, DType t, const void* dy, void* dw, int64_t batch, int64_t seq, int64_t d,
                           int64_t rows) {
  if (rows * d == 0) return;
  dispatch(t, "position_embedding_dw", [&](auto tag) {
    using T = decltype(tag);
    position_dw_kernel<T><<<blocks_for(rows * d), 256, 0, stream_of(c)>>>(static_cast<const T*>(dy),
                                                                           static_cast<T*>(dw), batch, seq, d, rows);
    BRAID_LAUNCH_CHECK("position_dw_kernel");
  });
}

}  // namespace braid::cuda
