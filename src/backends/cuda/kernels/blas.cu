// GEMMs through cuBLAS (row-major wrapper over column-major cuBLAS: C^T = op(B)^T op(A)^T), the linear
// forward through cuBLASLt with bias / bias+relu / bias+gelu epilogues, and deterministic column sums.
// f32 GEMMs use CUBLAS_COMPUTE_32F (no TF32: results match the CPU's fp32 BLAS to rounding); bf16 GEMMs
// take bf16 operands with fp32 accumulation (CUBLAS_COMPUTE_32F, fp32 alpha/beta). Autocast (Ctx::autocast):
// f32 GEMMs cast both operands to Ctx::autocast_type (bf16 or f16) in the autocast scratch first (the span each
// covers, strides kept) and run 16-bit x 16-bit -> f32 on tensor cores; C, bias and the epilogue stay f32.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <limits>

#include "backends/cuda/kernels/device_util.cuh"

namespace braid::cuda {
namespace {

constexpr int64_t kChunkRows = 64;

cudaDataType_t data_type(DType t) {
  if (t == DType::f32) return CUDA_R_32F;
  if (t == DType::bf16) return CUDA_R_16BF;
  if (t == DType::f16) return CUDA_R_16F;
  throw InternalError(std::string("GEMM on GPU has no ") + std::string(dtype_name(t)) + " version (f32, bf16, f16)");
}

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw InternalError(std::string("GEMM ") + what + " = " + std::to_string(v) + " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

template <typename T>
__global__ void colsum_partial(const T* x, double* part, int64_t rows, int64_t cols) {
  int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  int64_t chunk = blockIdx.y, r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  double s = 0;
  for (int64_t r = r0; r < r1; ++r) s += to_f(x[r * cols + j]);
  part[chunk * cols + j] = s;
}

template <typename T>
__global__ void colsum_finish(const double* part, T* out, int64_t chunks, int64_t cols) {
  BRAID_GRID_LOOP(j, cols) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += part[k * cols + j];
    out[j] = from_d<T>(s);
  }
}

template <typename T>
__global__ void bias_rows(const T* b, T* y, int64_t m, int64_t n) {
  BRAID_GRID_LOOP(i, m * n) y[i] = b[i % n];
}

// Elements a row-major operand of `rows` x `cols` (row stride ld), `batch` times at stride s, spans.
int64_t span_of(int64_t batch, int64_t s, int64_t rows, int64_t ld, int64_t cols) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  return (batch - 1) * s + (rows - 1) * ld + cols;
}

// Casts `n` f32 elements at x to c.autocast_type at the autocast scratch's offset *at (advanced, 256-aligned).
const void* stage_autocast(const Ctx& c, const void* x, int64_t n, size_t* at) {
  if (c.shadow_count > 0) {  // a parameter or activation with a current 16-bit copy: no cast
    const Bf16Shadow* end = c.shadows + c.shadow_count;
    const Bf16Shadow* s = std::lower_bound(c.shadows, end, x, [](const Bf16Shadow& a, const void* p) {
      return std::less<const void*>()(a.src, p);
    });
    for (; s != end && s->src == x; ++s)  // values sharing bytes at different times: the current one has n > 0
      if (n <= s->n) return s->dst;
  }
  size_t bytes = (static_cast<size_t>(n) * 2 + 255) / 256 * 256;
  if (*at + bytes > c.autocast_bytes)
    throw InternalError("autocast: 16-bit scratch of " + std::to_string(c.autocast_bytes) + " bytes, a GEMM needs " +
                        std::to_string(*at + bytes) + " (ops::cuda_autocast_bytes sizes it)");
  void* y = static_cast<char*>(c.autocast) + *at;
  *at += bytes;
  cast(c, DType::f32, x, c.autocast_type, y, n);
  return y;
}

// cuBLASLt descriptors of one linear call, destroyed on scope exit (also when a check throws).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;  // owns the handles
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two up to 256 dividing the address (cuBLASLt's alignment preferences).
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// One linear problem's cuBLASLt descriptors and chosen algorithm, made once per shape, types, epilogue,
// alignments and device (the descriptors and the heuristic query cost tens of microseconds of host time; a GPT-2
// step makes ~70 such calls). Kept for the process's life; `found` false: cuBLASLt offered no algorithm.
struct LtKey {
  int device, ab, dt, epi;
  int64_t m, fin, fout;
  uint32_t align_a, align_b, align_cd;
  size_t ws;
  bool bias;
  uint32_t align_aux = 0;  // GELU_AUX_BIAS: the pre-activation's alignment (0: no aux output)
  bool operator<(const LtKey& o) const {
    return std::tie(device, ab, dt, epi, m, fin, fout, align_a, align_b, align_cd, ws, bias, align_aux) <
           std::tie(o.device, o.ab, o.dt, o.epi, o.m, o.fin, o.fout, o.align_a, o.align_b, o.align_cd, o.ws, o.bias,
                    o.align_aux);
  }
};
struct LtPlan {
  std::mutex mu;  // from setting the bias / aux pointers on d.op to the enqueued call
  LtDescs d;
  cublasLtMatmulHeuristicResult_t result{};
  bool found = false;
};

void make_lt_plan(const Ctx& c, const LtKey& k, LtPlan& p) {
  LtDescs& d = p.d;
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  auto epi = static_cast<cublasLtEpilogue_t>(k.epi);
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (k.bias) {
    // The bias has the output's type (f32 under autocast, where the operands are 16-bit): said explicitly. Its
    // pointer is set at each call (linear_lt holds the cache's lock until the call is enqueued).
    int32_t bias_type = k.dt;
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                      sizeof(bias_type)));
  }
  if (k.align_aux) {  // the pre-activation (aux), in the output's type (the default), (fout x m) like the output
    int64_t ld = k.fout;
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  const auto ab = static_cast<cudaDataType_t>(k.ab), dt = static_cast<cudaDataType_t>(k.dt);
  // Column-major view: W is (fin x fout) with ld fin, used transposed; x^T is (fin x m); y^T is (fout x m).
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab, k.fin, k.fout, k.fin));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab, k.fin, k.m, k.fin));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, dt, k.fout, k.m, k.fout));
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  size_t ws = k.ws;
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof(ws)));
  // The heuristic assumes 256-byte aligned matrices unless told otherwise; values of the memory plan are 64-byte
  // aligned (16-bit activations are GEMM operands directly in graphs with bf16 values), so say what they are.
  const uint32_t aa = k.align_a, abb = k.align_b, acd = k.align_cd;
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                                          sizeof(aa)));
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &abb,
                                                          sizeof(abb)));
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &acd,
                                                          sizeof(acd)));
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &acd,
                                                          sizeof(acd)));
  int found = 0;
  auto lt = static_cast<cublasLtHandle_t>(c.cublaslt);
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &p.result, &found);
  p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
}

// Returns false when cuBLASLt has no algorithm for this problem (the caller falls back). aux: GELU_AUX_BIAS's
// pre-activation output (e must be BiasGelu, with a bias), or null.
bool linear_lt(const Ctx& c, DType t, const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t fin,
               int64_t fout, Epilogue e, void* aux = nullptr) {
  cudaDataType_t dt = data_type(t), ab = dt;
  if (t == DType::f32 && c.autocast) {
    size_t at = 0;
    x = stage_autocast(c, x, m * fin, &at);
    w = stage_autocast(c, w, fout * fin, &at);
    ab = data_type(c.autocast_type);
  }
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (e == Epilogue::Bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (e == Epilogue::BiasRelu) epi = CUBLASLT_EPILOGUE_RELU_BIAS;
  if (e == Epilogue::BiasGelu) epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  if (bias == nullptr) epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (aux && epi == CUBLASLT_EPILOGUE_GELU_BIAS) epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  else aux = nullptr;
  LtKey key{c.device, static_cast<int>(ab), static_cast<int>(dt), static_cast<int>(epi), m, fin, fout,
            alignment_of(w), alignment_of(x), alignment_of(y), c.blas_workspace_bytes, bias != nullptr};
  if (aux) key.align_aux = alignment_of(aux);
  static std::mutex mu;  // the cache (plans are never removed: a plan's address stays valid)
  static std::map<LtKey, std::unique_ptr<LtPlan>> plans;
  LtPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans.find(key);
    if (it == plans.end()) {
      auto made = std::make_unique<LtPlan>();
      make_lt_plan(c, key, *made);  // a failed check throws before the plan is kept
      it = plans.emplace(key, std::move(made)).first;
    }
    plan = it->second.get();
  }
  LtPlan& p = *plan;
  if (!p.found) return false;
  // Per plan: devices (and so keys) differ between the threads of a multi-GPU engine; only replicas sharing a GPU
  // wait for each other here.
  std::lock_guard<std::mutex> call_lock(p.mu);
  if (bias)
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux)
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                      sizeof(aux)));
  float alpha = 1.f, beta = 0.f;
  auto lt = static_cast<cublasLtHandle_t>(c.cublaslt);
  BRAID_CUBLAS_CHECK(cublasLtMatmul(lt, p.d.op, &alpha, w, p.d.a, x, p.d.b, &beta, y, p.d.c, y, p.d.c, &p.result.algo,
                                    c.blas_workspace, c.blas_workspace_bytes, stream_of(c)));
  return true;
}

int64_t chunks_of(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

}  // namespace

void gemm(const Ctx& c, DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
          int64_t lda, int64_t sa, const void* b, int64_t ldb, int64_t sb, float beta, void* cm, int64_t ldc, int64_t sc,
          int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  cudaDataType_t dt = data_type(t), ab = dt;
  if (t == DType::f32 && c.autocast) {
    size_t at = 0;
    a = stage_autocast(c, a, span_of(batch, sa, ta ? k : m, lda, ta ? m : k), &at);
    b = stage_autocast(c, b, span_of(batch, sb, tb ? n : k, ldb, tb ? k : n), &at);
    ab = data_type(c.autocast_type);
  }
  auto h = static_cast<cublasHandle_t>(c.cublas);
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS needs ld >= rows of the stored column-major matrix, even where k == 0.
  BRAID_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ob, oa, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha, b, ab,
                                                as_int(ldb, "ldb"), sb, a, ab, as_int(lda, "lda"), sa, &beta, cm, dt,
                                                as_int(ldc, "ldc"), sc, as_int(batch, "batch"), CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
}

void gemm_autocast_f32(const Ctx& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                       int64_t lda, int64_t sa, const void* b, int64_t ldb, int64_t sb, float beta, void* cm, int64_t ldc,
                       int64_t sc, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  auto h = static_cast<cublasHandle_t>(c.cublas);
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t lp = data_type(c.autocast_type);
  BRAID_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ob, oa, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha, b,
                                                lp, as_int(ldb, "ldb"), sb, a, lp, as_int(lda, "lda"),
                                                sa, &beta, cm, CUDA_R_32F, as_int(ldc, "ldc"), sc, as_int(batch, "batch"),
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void linear(const Ctx& c, DType t, const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t fin,
            int64_t fout, Epilogue e) {
  if (m == 0 || fout == 0) return;
  if (fin > 0 && linear_lt(c, t, x, w, bias, y, m, fin, fout, e)) return;
  if (e == Epilogue::BiasRelu || e == Epilogue::BiasGelu)
    throw InternalError("linear: cuBLASLt has no algorithm for the fused activation epilogue of [" +
                        std::to_string(m) + ", " + std::to_string(fin) + "] x [" + std::to_string(fout) + ", " +
                        std::to_string(fin) + "]^T");
  dispatch(t, "linear", [&](auto tag) {
    using T = decltype(tag);
    if (bias) {
      bias_rows<T><<<blocks_for(m * fout), 256, 0, stream_of(c)>>>(static_cast<const T*>(bias), static_cast<T*>(y), m,
                                                                    fout);
      BRAID_LAUNCH_CHECK("bias_rows");
    }
  });
  gemm(c, t, false, true, m, fout, fin, 1.f, x, fin, 0, w, fin, 0, bias ? 1.f : 0.f, y, fout, 0);
}

bool linear_gelu(const Ctx& c, DType t, const void* x, const void* w, const void* bias, void* h, void* y, int64_t m,
                 int64_t fin, int64_t fout) {
  if (m == 0 || fout == 0 || fin == 0 || bias == nullptr) return false;
  if (t == DType::f32 && c.autocast == nullptr) return false;  // fp32 runs keep the CPU's gelu bit for bit
  if (fout % 8 != 0) return false;                             // cuBLASLt: the aux's leading dimension
  if (alignment_of(h) < 16 || alignment_of(y) < 16) return false;
  return linear_lt(c, t, x, w, bias, y, m, fin, fout, Epilogue::BiasGelu, h);
}

size_t colsum_workspace(int64_t rows, int64_t cols) { return static_cast<size_t>(chunks_of(rows) * cols) * 8; }

const void* autocast_operand(const Ctx& c, const void* x, int64_t n, size_t* at) { return stage_autocast(c, x, n, at); }

void colsum(const Ctx& c, DType t, const void* x, int64_t rows, int64_t cols, void* out, DType out_t) {
  if (cols == 0) return;
  if (c.workspace_bytes < colsum_workspace(rows, cols))
    throw InternalError("colsum: CUDA workspace of " + std::to_string(c.workspace_bytes) + " bytes, needs " +
                        std::to_string(colsum_workspace(rows, cols)));
  int64_t chunks = chunks_of(rows);
  auto* part = static_cast<double*>(c.workspace);
  dispatch(t, "colsum", [&](auto tag) {
    using T = decltype(tag);
    if (chunks > 0) {
      dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(chunks));
      colsum_partial<T><<<grid, 256, 0, stream_of(c)>>>(static_cast<const T*>(x), part, rows, cols);
      BRAID_LAUNCH_CHECK("colsum_partial");
    }
  });
  dispatch(out_t, "colsum", [&](auto tag) {
    using T = decltype(tag);
    colsum_finish<T><<<blocks_for(cols), 256, 0, stream_of(c)>>>(part, static_cast<T*>(out), chunks, cols);
    BRAID_LAUNCH_CHECK("colsum_finish");
  });
}

}  // namespace braid::cuda
