// Float convolution and average pooling on oneDNN's primitives (conv2d forward, its data and weight
// gradients; avg_pool2d forward and backward), and the choice between them and braid's own kernels
// (BRAID_CONV=im2col|onednn, BRAID_POOL=loops|onednn, read once per process).
// Invariants: braid's tensors stay plain NCHW / OIHW; blocked copies, per-chunk partial sums and oneDNN's
// scratchpads (mode user) are carved from the workspace the op's OpDef::workspace reported, so a step
// allocates no tensor memory. The batch is cut into chunks from the shapes alone and every chunk runs
// single-threaded primitives on one OpenMP thread, so results do not depend on the thread count.
// Primitives are created once per shape (the first workspace query or call) and kept for the process.
// Not here: f64 (the gradient checks keep im2col), max pooling (oneDNN's does not propagate NaN). Fusion: the
// forward convolution takes a per-chunk epilogue (its activation), not a post-op (training's activation gradient
// reads the convolution's output, which a post-op would not write).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace braid::ops::cpu {

enum class ConvImpl { Im2col, OneDnn };
enum class PoolImpl { Loops, OneDnn };

// The implementation float conv2d (and its gradients) / avg_pool2d use: BRAID_CONV / BRAID_POOL, read once,
// with a warning on stderr for other values; the default is onednn where braid is built with it.
ConvImpl conv_impl();
PoolImpl pool_impl();
// Whether this braid was built with oneDNN (BRAID_WITH_ONEDNN).
bool onednn_built();

// For tests and benchmarks that compare both implementations in one process: sets the choice until the
// object is destroyed. Not thread-safe against kernels running meanwhile; workspace sizes follow the choice,
// so query them after setting it.
class ScopedSpatialImpl {
 public:
  ScopedSpatialImpl(ConvImpl conv, PoolImpl pool);
  ~ScopedSpatialImpl();
  ScopedSpatialImpl(const ScopedSpatialImpl&) = delete;
  ScopedSpatialImpl& operator=(const ScopedSpatialImpl&) = delete;

 private:
  ConvImpl conv_;
  PoolImpl pool_;
};

// One convolution or pooling window over x [B, C, H, W] (O: conv2d's output channels; y is [B, O, Ho, Wo] or
// [B, C, Ho, Wo] for pooling).
struct SpatialShape {
  int64_t B = 0, C = 0, H = 0, W = 0, O = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int64_t Ho = 0, Wo = 0;
  bool bias = false;  // conv2d forward adds a bias [O]
};

// Chunks of the batch: `per` samples each, the last `tail` (0 < tail <= per) samples; fixed by B alone.
struct BatchChunks {
  int64_t per = 0, count = 0, tail = 0;
};
BatchChunks batch_chunks(int64_t B);

// True on this thread while braid is inside a oneDNN call. oneDNN allocates small bookkeeping of its own
// there on every execution (its argument map, memory handles), as its sgemm allocates packing buffers;
// braid's code around it allocates nothing. Tests of the no-allocation rule count outside such calls.
bool in_library_call();

// oneDNN primitives (convolutions, reorders, poolings) braid has created in this process (0 without oneDNN):
// a test checks that a second call of the same shape creates none.
int64_t onednn_primitives_created();

enum class SpatialPass { ConvForward, ConvGradInput, ConvGradWeight, AvgPoolForward, AvgPoolBackward };

#ifdef BRAID_HAVE_ONEDNN

// Bytes of workspace `pass` needs for shape s on oneDNN, creating its primitives the first time; nullopt
// where oneDNN has no primitive for it (said once on stderr): the op then runs on braid's kernel for it.
std::optional<size_t> onednn_workspace(SpatialPass pass, const SpatialShape& s);

// The calls below need onednn_workspace(pass, s) to have a value, and at least that many bytes at ws.
// x [B, C, H, W], w [O, C, kh, kw], b [O] or nullptr -> y [B, O, Ho, Wo]. after(b0, n), when given, runs on the
// chunk's thread once samples [b0, b0 + n) of y are written, while they are in that core's cache (a fused
// epilogue: conv2d + its activation, ops::cpu::conv2d_activation).
void onednn_conv_forward(const SpatialShape& s, const float* x, const float* w, const float* b, float* y, void* ws,
                         size_t ws_bytes, const std::function<void(int64_t, int64_t)>& after = {});
// dy [B, O, Ho, Wo], w -> dx [B, C, H, W]
void onednn_conv_grad_input(const SpatialShape& s, const float* dy, const float* w, float* dx, void* ws,
                            size_t ws_bytes);
// dy, x -> dw [O, C, kh, kw]: one partial per chunk, added in chunk order.
void onednn_conv_grad_weight(const SpatialShape& s, const float* dy, const float* x, float* dw, void* ws,
                             size_t ws_bytes);
// avg_pool2d with count_include_pad (PyTorch's default): x -> y, and dy -> dx.
void onednn_avg_pool_forward(const SpatialShape& s, const float* x, float* y, void* ws, size_t ws_bytes);
void onednn_avg_pool_backward(const SpatialShape& s, const float* dy, float* dx, void* ws, size_t ws_bytes);

#endif

}  // namespace braid::ops::cpu
