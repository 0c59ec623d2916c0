// The CUDA kernels' launch interface: plain C++17 (no CUDA types: streams and library handles travel as
// void*), so that the C++20 adapters of kernels.cpp can call into the .cu files, which include only this
// header, check.h and CUDA's own. Every launcher enqueues on ctx.stream and returns without synchronising.
// Layouts are row-major and stated per launcher; sizes are element counts. Floating kernels take the
// element type as a DType: f32 everywhere, bf16 where noted (accumulation in fp32 or double).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"
#include "ops/activation.h"

namespace braid::cuda {

// A 16-bit copy (Ctx::autocast_type: bf16 or f16) of an f32 tensor (see Ctx::shadows).
struct Bf16Shadow {
  const void* src = nullptr;  // f32
  void* dst = nullptr;        // Ctx::autocast_type
  int64_t n = 0;
};

// What a kernel gets (mirrors ops::KernelCtx, plus the stream and the stream's library handles).
struct Ctx {
  bool training = true;
  uint64_t rng_key = 0;       // random stream of this node in this step (dropout masks)
  int64_t batch_offset = 0;   // first sample of this run within the unsplit micro-batch (see KernelCtx)
  // A shard of another axis (sequence parallelism): this part starts at shard_start of shard_full along
  // shard_axis (-1: not split so), as ops::KernelCtx.
  int shard_axis = -1;
  int64_t shard_start = 0, shard_full = 0;
  void* workspace = nullptr;  // device scratch for kernels (cuda_workspace_bytes asks for its size)
  size_t workspace_bytes = 0;
  void* stream = nullptr;     // cudaStream_t
  void* cublas = nullptr;     // cublasHandle_t, bound to `stream`
  void* cublaslt = nullptr;   // cublasLtHandle_t
  void* cudnn = nullptr;      // cudnnHandle_t, bound to `stream`
  void* blas_workspace = nullptr;  // cuBLAS / cuBLASLt workspace (owned by the stream)
  size_t blas_workspace_bytes = 0;
  // Device int: kernels OR in kBad* bits when data is invalid (a token or target id out of range); the
  // executor reads it after a run and raises the UserError the CPU kernel would have raised.
  int* error_flag = nullptr;
  int device = 0;
  // Autocast (mixed precision over fp32 storage): when set, every f32 GEMM (gemm, linear) casts its two
  // operands to autocast_type here (round to nearest even) and runs on tensor cores with fp32 accumulation and
  // an f32 result; everything else (norms, softmax, losses, reductions, optimizer) stays fp32. Null: pure fp32.
  // Size from ops::cuda_autocast_bytes; stream-ordered reuse (each GEMM overwrites it).
  void* autocast = nullptr;
  size_t autocast_bytes = 0;
  // bf16 (precision bf16), or f16 (precision f16: fp16's 10-bit mantissa and range up to 65504, with the
  // trainer's dynamic loss scaling keeping small gradients above fp16's underflow; an overflow is an inf the
  // loss scaler sees).
  DType autocast_type = DType::bf16;
  // Under autocast: autocast_type copies of f32 tensors that many GEMMs read (the parameters; activations that
  // several GEMMs read whole), kept current by their owners (CudaExecutor casts parameters once after an upload
  // and activations after the node producing them; the device optimizer writes the parameters' with each update),
  // sorted by src. A GEMM operand starting at src and spanning at most n elements is read from dst instead of
  // being cast again: the same values (round to nearest even). n = 0 marks a copy that is not current (several
  // entries may share a src: values that use the same bytes at different times).
  const Bf16Shadow* shadows = nullptr;
  int shadow_count = 0;
};


enum BadData : int { kBadToken = 1, kBadTarget = 2 };

constexpr int kMaxRank = 8;

// Element i of an output of shape dims reads input element sum_k coord_k * strides[k] (stride 0 on an axis
// the input broadcasts along).
struct BcastIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

// reduce_like: output element o (coordinates over `kept` dims) sums the input elements
// base(o) + sum_r coord_r * red_strides[r] over every coordinate of the reduced dims, in row-major order.
struct ReduceIndex {
  int kept_rank = 0;
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};
  int red_rank = 0;
  int64_t red_dims[kMaxRank] = {};
  int64_t red_strides[kMaxRank] = {};
  int64_t red_count = 1;
};

// Window of conv2d and the 2-D pools (PyTorch's floor formula; see ops/defs/spatial_util.h).
struct Window {
  int64_t B = 0, C = 0, H = 0, W = 0, kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, Ho = 0, Wo = 0;
};

// The activations: ops/activation.h's list, shared with the CPU kernels.
using Act = ::braid::ops::Act;

// ---- elementwise (elementwise.cu) ------------------------------------------------------------------------
// y (n elements) = x_0 op x_1 op ... (op = * when mul, else +), folded left to right as the CPU kernel.
void nary(const Ctx& c, DType t, bool mul, int num_in, const void* const* x, const BcastIndex* idx, void* y, int64_t n);
void reduce_like(const Ctx& c, DType t, const void* g, const ReduceIndex& r, void* y, int64_t n_out);
void fill(const Ctx& c, DType t, void* y, int64_t n, double value);
void activation(const Ctx& c, DType t, Act a, const void* x, void* y, int64_t n);
// dx = dy * act'(z), z the activation's input or output (its row's grad_reads).
void activation_grad(const Ctx& c, DType t, Act a, const void* dy, const void* z, void* dx, int64_t n);
// Element i's index in the unsplit tensor (ops/defs/dropout.cpp's global()): base + i when len == 0; on a shard of
// axis a > 0, i = (row * len + t) * inner + k maps to ((row0 + row) * full + start + t) * inner + k.
struct ShardIndex {
  uint64_t base = 0;
  int64_t inner = 1, len = 0, full = 0, start = 0, row0 = 0;
};
// mask = keep ? 1/(1-p) : 0 with keep = uniform_at(key, index(i)) >= p (core/rng.h, bit for bit); y = x mask.
// mask_t: t, or f32 for 16-bit values (the scale unrounded, as the backward's dy * mask uses it).
void dropout(const Ctx& c, DType t, const void* x, void* y, void* mask, DType mask_t, int64_t n, double p,
             bool active, uint64_t key, const ShardIndex& index);
// dst[i] += src[i] * scale (gradient accumulation over micro-batches); first: dst = src * scale.
void axpy(const Ctx& c, DType t, const void* src, void* dst, int64_t n, double scale, bool first);
// Casts between f32 and bf16 or f16 (round to nearest even), for autocast and master weights.
void cast(const Ctx& c, DType from, const void* x, DType to, void* y, int64_t n);

// ---- normalisation (norm.cu) -------------------------------------------------------------------------------
// x: (rows, d). mean, rstd: (rows). Statistics in double, as the CPU kernel.
void layer_norm(const Ctx& c, DType t, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                int64_t rows, int64_t d, double eps);
// Workspace: layer_norm_grad_workspace(rows, d) bytes.
void layer_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                     const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t d);
size_t layer_norm_grad_workspace(int64_t rows, int64_t d);
// rms_norm: rstd (rows) = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w; statistics in double, as the CPU kernel.
void rms_norm(const Ctx& c, DType t, const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t d,
              double eps);
// Workspace: rms_norm_grad_workspace(rows, d) bytes.
void rms_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* rstd, void* dx,
                   void* dw, int64_t rows, int64_t d);
size_t rms_norm_grad_workspace(int64_t rows, int64_t d);
// x viewed as (outer, n, inner) around the softmax axis.
void softmax(const Ctx& c, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner);
void softmax_grad(const Ctx& c, DType t, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                  int64_t inner);
// The same on cuDNN (cudnn_softmax.cu) for f32; false (nothing done) otherwise, and the two above run.
bool cudnn_softmax(const Ctx& c, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner);
bool cudnn_softmax_grad(const Ctx& c, DType t, const void* dy, const void* y, void* dx, int64_t outer, int64_t n,
                        int64_t inner);

// ---- losses and metric (loss.cu) -------------------------------------------------------------------------------
// logits (n, classes) of dtype t (f32 or bf16); targets (n) i32 or i64 (targets_i64); loss and dloss f32.
// Workspace: n doubles.
void cross_entropy(const Ctx& c, DType t, const void* logits, const void* targets, bool targets_i64, void* loss,
                   int64_t n, int64_t classes);
void cross_entropy_grad(const Ctx& c, DType t, const void* dloss, const void* logits, const void* targets,
                        bool targets_i64, void* dx, int64_t n, int64_t classes);
// a, b: (rows, m). Workspace: rows doubles.
void mse(const Ctx& c, DType t, const void* a, const void* b, void* loss, int64_t rows, int64_t m);
void mse_grad(const Ctx& c, DType t, const void* dloss, const void* a, const void* b, void* da, void* db, int64_t n);
// out: one f32. Workspace: n doubles.
void accuracy(const Ctx& c, DType t, const void* logits, const void* targets, bool targets_i64, float* out,
              int64_t n, int64_t classes);

// ---- data movement (shape.cu) ------------------------------------------------------------------------------
void copy(const Ctx& c, void* dst, const void* src, size_t bytes);
// `height` rows of `width` bytes: dst + r * dpitch <- src + r * spitch.
void copy_2d(const Ctx& c, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height);
// y[o] = x[sum coord_k(o) * idx.strides[k]] for elements of elem_size bytes (2, 4 or 8).
void gather_strided(const Ctx& c, size_t elem_size, const void* x, const BcastIndex& idx, void* y, int64_t n);

// ---- GEMM (blas.cu) ----------------------------------------------------------------------------------------------
// Row-major C[m, n] = alpha op(A) op(B) + beta C, op = transpose when ta / tb; lda/ldb/ldc are row strides as
// stored; `batch` matrices at element strides sa, sb, sc. f32: full fp32 (no TF32); bf16: fp32 accumulation.
void gemm(const Ctx& c, DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
          int64_t lda, int64_t sa, const void* b, int64_t ldb, int64_t sb, float beta, void* cm, int64_t ldc, int64_t sc,
          int64_t batch = 1);
// The same with operands of c.autocast_type already (autocast paths keeping their own copies) and an f32 C.
void gemm_autocast_f32(const Ctx& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                   int64_t lda, int64_t sa, const void* b, int64_t ldb, int64_t sb, float beta, void* cm, int64_t ldc,
                   int64_t sc, int64_t batch);
enum class Epilogue : int { None = 0, Bias = 1, BiasRelu = 2, BiasGelu = 3 };
// y (m, fout) = x (m, fin) W^T (fout, fin) [+ bias, then relu / gelu(tanh)] through cuBLASLt's epilogues.
// Falls back to bias rows + gemm (Bias only) where cuBLASLt finds no algorithm.
void linear(const Ctx& c, DType t, const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t fin,
            int64_t fout, Epilogue e = Epilogue::Bias);
// A linear layer and the tanh-form gelu of its output in one cuBLASLt call (epilogue GELU_AUX_BIAS): h (m, fout)
// = x W^T + bias (the pre-activation, which gelu's backward reads) and y = gelu(h), both of dtype t. Under
// autocast only (16-bit operands). False, having done nothing, where cuBLASLt offers no algorithm: the caller runs
// the two ops apart.
bool linear_gelu(const Ctx& c, DType t, const void* x, const void* w, const void* bias, void* h, void* y, int64_t m,
                 int64_t fin, int64_t fout);
// out[j] (dtype out_t) = sum over rows r (in fixed chunks, partial sums in double, chunks summed in order) of
// x[r, j] (dtype t). Deterministic. Workspace: colsum_workspace(rows, cols) bytes.
void colsum(const Ctx& c, DType t, const void* x, int64_t rows, int64_t cols, void* out, DType out_t);
// The Ctx::autocast_type copy of the f32 tensor at x (n elements): its current 16-bit copy from Ctx::shadows (a
// parameter under autocast), else a cast into the autocast scratch at byte offset *at (advanced). The GEMM ops of
// graphs with 16-bit values read their f32 parameters (master weights) through it.
const void* autocast_operand(const Ctx& c, const void* x, int64_t n, size_t* at);
size_t colsum_workspace(int64_t rows, int64_t cols);

// ---- embeddings (embedding.cu) -------------------------------------------------------------------------------
void embedding(const Ctx& c, DType t, const void* tokens, bool tokens_i64, const void* w, void* y, int64_t n,
               int64_t num, int64_t dim);
// Deterministic: tokens are stably sorted (CUB radix sort), then each id's rows are summed in token order,
// exactly the CPU kernel's order. Workspace: embedding_dw_workspace(n, num).
void embedding_dw(const Ctx& c, DType t, const void* dy, const void* tokens, bool tokens_i64, void* dw, int64_t n,
                  int64_t num, int64_t dim);
size_t embedding_dw_workspace(int64_t n, int64_t num);
void position_embedding(const Ctx& c, DType t, const void* x, const void* w, void* y, int64_t batch, int64_t seq,
                        int64_t d);
void position_embedding_dw(const Ctx& c, DType t, const void* dy, void* dw, int64_t batch, int64_t seq, int64_t d,
                           int64_t rows);

// ---- attention core (attention.cu) -------------------------------------------------------------------------------
// qkv (B, T, 3d) -> context (B, T, d), lse (B, h, T) in f32. Workspace: attention_forward_workspace(...).
void attention_forward(const Ctx& c, DType t, const void* qkv, void* context, void* lse, int64_t B, int64_t T,
                       int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base);
size_t attention_forward_workspace(DType t, int64_t T, int64_t h);
// dcontext (B, T, d), qkv, context, lse (f32) -> dqkv (B, T, 3d); the dropout mask drawn again from (key,
// mask_base). Workspace: attention_backward_workspace(...).
void attention_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                        const void* lse, void* dqkv, int64_t B, int64_t T, int64_t d, int64_t h, bool causal, double p,
                        uint64_t key, uint64_t mask_base);
size_t attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t h);
// The fused path of both (flash_attention.cu), which attention_forward/backward take by themselves when
// flash_attention_supported: autocast over f32 values, or bf16 values (t: the values' dtype), head dim 32, 64 or
// 128, at most 65535 samples, not switched off (by shape and mode only: a forward and its backward take the same
// path). set_flash_attention(false) makes every call take the staged path (tests compare the two).
void set_flash_attention(bool on);
bool flash_attention_supported(const Ctx& c, DType t, int64_t B, int64_t dh);
void flash_attention_forward(const Ctx& c, DType t, const void* qkv, void* context, void* lse, int64_t B, int64_t T,
                             int64_t d, int64_t h, bool causal, double p, uint64_t key, uint64_t mask_base);
void flash_attention_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                              const void* lse, void* dqkv, int64_t B, int64_t T, int64_t d, int64_t h, bool causal,
                              double p, uint64_t key, uint64_t mask_base);
size_t flash_attention_backward_workspace(int64_t B, int64_t T, int64_t h);
// The op's attention with kv_heads (kv, dividing h) and rope_theta (0: none) around the core above (attention.cu):
// qkv (B, T, (h + 2 kv) dh), its q and k rotated in place by the forward (the saved qkv holds them rotated);
// dqkv of the unrotated projection. kv == h without rope is exactly attention_forward / attention_backward.
void attention_gqa_forward(const Ctx& c, DType t, void* qkv, void* context, void* lse, int64_t B, int64_t T, int64_t d,
                           int64_t h, int64_t kv, double theta, bool causal, double p, uint64_t key, uint64_t mask_base);
size_t attention_gqa_forward_workspace(DType t, int64_t B, int64_t T, int64_t d, int64_t h, int64_t kv);
void attention_gqa_backward(const Ctx& c, DType t, const void* dcontext, const void* qkv, const void* context,
                            const void* lse, void* dqkv, int64_t B, int64_t T, int64_t d, int64_t h, int64_t kv,
                            double theta, bool causal, double p, uint64_t key, uint64_t mask_base);
size_t attention_gqa_backward_workspace(DType t, int64_t B, int64_t T, int64_t d, int64_t h, int64_t kv);

// ---- convolution on cuDNN (cudnn_conv.cu) ----------------------------------------------------------------------
// x (B, C, H, W), w (O, C, kh, kw), y (B, O, Ho, Wo), NCHW f32 without autocast. Each returns false, having done
// nothing, when cuDNN is not used for this call (autocast, bf16 values, or no accurate deterministic algorithm
// fitting c.workspace_bytes): the caller runs the im2col path. Forward with `accumulate` adds to y (the bias).
bool cudnn_conv_forward(const Ctx& c, DType t, const void* x, const void* w, void* y, const Window& win, int64_t O,
                        bool accumulate);
bool cudnn_conv_backward_data(const Ctx& c, DType t, const void* dy, const void* w, void* dx, const Window& win,
                              int64_t O);
bool cudnn_conv_backward_filter(const Ctx& c, DType t, const void* dy, const void* x, void* dw, const Window& win,
                                int64_t O);

// ---- convolution and pooling (conv.cu) ---------------------------------------------------------------------------
// One sample: x (C, H, W) -> col (C kh kw, Ho Wo) and its adjoint (col2im overwrites x).
void im2col(const Ctx& c, DType t, const void* x, const Window& w, void* col);
void col2im(const Ctx& c, DType t, const void* col, const Window& w, void* x);
// y (B, O, P) <- bias[o] on every element of channel o.
void channel_fill(const Ctx& c, DType t, const void* bias, void* y, int64_t B, int64_t O, int64_t P);
// db[o] = sum over b, e of dy (B, O, P) in double.
void channel_sum(const Ctx& c, DType t, const void* dy, void* db, int64_t B, int64_t O, int64_t P);
void max_pool(const Ctx& c, DType t, const void* x, void* y, int64_t* argmax, const Window& w);
void max_pool_grad(const Ctx& c, DType t, const void* dy, const void* argmax, bool argmax_i64, void* dx,
                   const Window& w);
void avg_pool(const Ctx& c, DType t, const void* x, void* y, const Window& w);
void avg_pool_grad(const Ctx& c, DType t, const void* dy, void* dx, const Window& w);
void global_avg_pool(const Ctx& c, DType t, const void* x, void* y, int64_t planes, int64_t n);
void global_avg_pool_grad(const Ctx& c, DType t, const void* dy, void* dx, int64_t planes, int64_t n);

// ---- batch norm (batch_norm.cu) ------------------------------------------------------------------------------------
// x viewed as (B, C, S). nbt: num_batches_tracked (i64 or i32 scalar), incremented in training.
void batch_norm(const Ctx& c, DType t, const void* x, const void* w, const void* b, void* rm, void* rv, void* nbt,
                bool nbt_i64, void* y, void* mean, void* invstd, int64_t B, int64_t C, int64_t S, double eps,
                double momentum, bool training);
void batch_norm_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                     const void* invstd, void* dx, void* dw, void* db, int64_t B, int64_t C, int64_t S, bool training);
void bn_sync_sum(const Ctx& c, DType t, const void* x, double* s, int64_t B, int64_t C, int64_t S);
void bn_sync_sqdev(const Ctx& c, DType t, const void* x, const double* s1, double* s2, int64_t B, int64_t C,
                   int64_t S, double total);
void bn_sync_apply(const Ctx& c, DType t, const void* x, const double* s1, const double* s2, const void* w,
                   const void* b, void* rm, void* rv, void* nbt, bool nbt_i64, void* y, void* mean, void* invstd,
                   int64_t B, int64_t C, int64_t S, double eps, double momentum, double total);
void bn_sync_grad_sums(const Ctx& c, DType t, const void* dy, const void* x, const void* mean, const void* invstd,
                       double* sums, int64_t B, int64_t C, int64_t S);
void bn_sync_grad(const Ctx& c, DType t, const void* dy, const void* x, const void* w, const void* mean,
                  const void* invstd, const double* local, const double* global, void* dx, void* dw, void* db,
                  int64_t B, int64_t C, int64_t S, double total);

// ---- optimizers (optim.cu) ---------------------------------------------------------------------------------------------
// One parameter tensor of a fused multi-tensor update (device pointers; f32).
struct ParamSlot {
  float* p = nullptr;
  const float* g = nullptr;
  float* m = nullptr;  // AdamW exp_avg / SGD momentum_buffer (null: no momentum)
  float* v = nullptr;  // AdamW exp_avg_sq
  int64_t n = 0;
  void* p16 = nullptr;  // 16-bit copy of p (Ctx::shadows) rewritten with each update, or null
  int p16_half = 0;     // 1: p16 is fp16 (precision f16), 0: bf16
};
// Uploads `count` slots into `table` (device memory of multi_tensor_table_bytes(count) bytes, from the arena).
size_t multi_tensor_table_bytes(int count);
void upload_slots(const Ctx& c, const ParamSlot* slots, int count, void* table);
// torch.optim.AdamW (single-tensor path, fp32, same operation order as backends/cpu/optimizer.cpp) over every slot
// in one launch. step: 1-based.
void adamw(const Ctx& c, const void* table, int count, int64_t max_n, double lr, double beta1, double beta2,
           double eps, double weight_decay, int64_t step);
void sgd(const Ctx& c, const void* table, int count, int64_t max_n, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov, bool first);
// Gradient-norm clipping over the same table (torch.nn.utils.clip_grad_norm_, exec::clip_grad_norm): *out (device,
// one double) = the sum of every slot's g^2; then, when the coefficient is below 1, g *= k on every slot.
void grad_sum_squares(const Ctx& c, const void* table, int count, int64_t max_n, double* out);
void grad_scale(const Ctx& c, const void* table, int count, int64_t max_n, double k);

}  // namespace braid::cuda
