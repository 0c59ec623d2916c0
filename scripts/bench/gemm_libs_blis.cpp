// BLIS's typed API for gemm_libs.cpp, in its own translation unit: blis.h and OpenBLAS's cblas.h declare the
// same CBLAS names. Row-major C[m, n] = op(A) op(B) + beta C.
#include <blis.h>

#include <cstdint>

void blis_sgemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
  float alpha = 1.f;
  bli_sgemm(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k, &alpha,
            const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1);
}
void blis_threads(int n) { bli_thread_set_num_threads(n); }
const char* blis_arch() { return bli_arch_string(bli_arch_query_id()); }
