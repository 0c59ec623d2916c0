// oneDNN convolution and average pooling for braid's float kernels (see onednn_spatial.h for the contract).
// Convolutions let oneDNN choose its layouts (format_tag::any: blocked nChw16c / OIhw16i16o, where its JIT
// kernels run) and reorder braid's plain tensors into them and back; measured faster including the reorders
// than the plain-layout primitives (oneDNN's own im2col + GEMM) on every benchmark shape (docs/benchmarks.md).
// Each chunk of samples reorders its slice, runs the primitive and reorders back on one thread, in its own
// region of the workspace; weights are reordered once per call before the chunks. The weight gradient is one
// partial per chunk, reordered to OIHW and added in chunk order. Pooling runs on plain NCHW (no reorders).
// Primitives are created with one OpenMP thread in effect (oneDNN sizes its kernels by the thread count) and
// run with one; reorders use oneDNN's library scratchpad (plain <-> blocked f32 reorders need none).
#include "ops/cpu/onednn_spatial.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "core/parallel.h"

#ifdef BRAID_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>
#endif

namespace braid::ops::cpu {
namespace {

// -1: no override (the environment's choice); otherwise the enum's value (ScopedSpatialImpl).
std::atomic<int> g_conv_override{-1}, g_pool_override{-1};

// Reads BRAID_CONV or BRAID_POOL once: `plain` names braid's own kernels; onednn (the default where built).
int impl_from_env(const char* var, std::string_view plain) {
  const char* v = std::getenv(var);
  const std::string_view s = v ? v : "";
  if (s == plain) return 0;
  if (onednn_built()) {
    if (!s.empty() && s != "onednn")
      std::fprintf(stderr, "braid: warning: %s=%s is not one of %s, onednn; using onednn\n", var, v,
                   std::string(plain).c_str());
    return 1;
  }
  if (!s.empty())
    std::fprintf(stderr, "braid: warning: %s=%s: %s; using %s\n", var, v,
                 s == "onednn" ? "this braid was built without oneDNN" : "not a known value",
                 std::string(plain).c_str());
  return 0;
}

}  // namespace

bool onednn_built() {
#ifdef BRAID_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

ConvImpl conv_impl() {
  static const int env = impl_from_env("BRAID_CONV", "im2col");
  const int o = g_conv_override.load(std::memory_order_relaxed);
  return static_cast<ConvImpl>(o >= 0 ? o : env);
}

PoolImpl pool_impl() {
  static const int env = impl_from_env("BRAID_POOL", "loops");
  const int o = g_pool_override.load(std::memory_order_relaxed);
  return static_cast<PoolImpl>(o >= 0 ? o : env);
}

ScopedSpatialImpl::ScopedSpatialImpl(ConvImpl conv, PoolImpl pool) : conv_(conv_impl()), pool_(pool_impl()) {
  BRAID_ASSERT(onednn_built() || (conv == ConvImpl::Im2col && pool == PoolImpl::Loops),
               "ScopedSpatialImpl: this braid was built without oneDNN");
  g_conv_override.store(static_cast<int>(conv));
  g_pool_override.store(static_cast<int>(pool));
}

ScopedSpatialImpl::~ScopedSpatialImpl() {
  g_conv_override.store(static_cast<int>(conv_));
  g_pool_override.store(static_cast<int>(pool_));
}

// At most 16 chunks (enough for 16 threads, a balanced 8 each on 2), of ceil(B / 16) samples.
namespace {
thread_local int g_library_depth = 0;
}  // namespace

bool in_library_call() { return g_library_depth > 0; }

BatchChunks batch_chunks(int64_t B) {
  constexpr int64_t kMaxChunks = 16;
  BatchChunks c;
  if (B <= 0) return c;
  const int64_t n = std::min(B, kMaxChunks);
  c.per = (B + n - 1) / n;
  c.count = (B + c.per - 1) / c.per;
  c.tail = B - (c.count - 1) * c.per;
  return c;
}

#ifdef BRAID_HAVE_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

std::atomic<int64_t> g_created{0};

// Marks this thread as inside oneDNN (in_library_call) while it lives.
class LibraryCall {
 public:
  LibraryCall() { ++g_library_depth; }
  ~LibraryCall() { --g_library_depth; }
  LibraryCall(const LibraryCall&) = delete;
  LibraryCall& operator=(const LibraryCall&) = delete;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
// A CPU stream per thread (oneDNN's streams are not for concurrent use), made once per thread.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// One OpenMP thread for oneDNN while it lives (its kernels are sized by, and run on, the thread count),
// restored after: the calling thread's setting only, as kernel_util's sgemm does.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }

 private:
  int saved_;
};

std::string shape_str(const SpatialShape& s) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "x [" + n(s.B) + ", " + n(s.C) + ", " + n(s.H) + ", " + n(s.W) + "], out " + n(s.O) + ", kernel [" + n(s.kh) +
         ", " + n(s.kw) + "], stride [" + n(s.sh) + ", " + n(s.sw) + "], padding [" + n(s.ph) + ", " + n(s.pw) + "]";
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

memory::desc plain(int64_t a, int64_t b, int64_t c, int64_t d, Tag tag) { return memory::desc({a, b, c, d}, kF32, tag); }

// A tensor as braid holds it (plain) and as the primitive wants it, with the reorder between them.
struct Operand {
  memory::desc user, prim;
  dnnl::primitive reorder;  // user -> prim for inputs, prim -> user for outputs; set only when they differ
  bool reordered = false;
  size_t offset = 0;  // of the primitive's copy within its region, when reordered
};

Operand operand(const memory::desc& user, const memory::desc& prim, bool input) {
  Operand op{user, prim, {}, user != prim, 0};
  if (op.reordered) {
    op.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user));
    ++g_created;
  }
  return op;
}

// Packs regions of a workspace: offsets 64-byte aligned from its start.
struct Packer {
  size_t bytes = 0;
  size_t take(size_t n) {
    const size_t at = bytes;
    bytes += align64(n);
    return at;
  }
};

using Pass = SpatialPass;

// The primitives of one pass for one chunk size, and the layout of a chunk's region of the workspace:
// [its operands' blocked copies][its scratchpad]. `a`, `b`: the inputs (x, w / dy, w / x, dy), `c`: the output.
struct ChunkPrims {
  dnnl::primitive prim;
  Operand a, b, c;
  size_t scratch = 0, scratch_offset = 0, region = 0;
};

// All of a pass for a whole-batch shape: the chunks' primitives (main and, when the last chunk is shorter,
// tail), where each chunk's region and the blocked weights lie in the workspace, and its size.
struct PassPlan {
  BatchChunks chunks;
  std::unique_ptr<ChunkPrims> main, tail;
  std::vector<size_t> chunk_offset;  // of each chunk's region
  size_t weights_main = 0, weights_tail = 0;  // of the blocked weights (forward, grad_input)
  size_t bytes = 0;
  const ChunkPrims& prims(int64_t chunk) const { return chunk + 1 == chunks.count && tail ? *tail : *main; }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The forward descriptor of a chunk of n samples: the primitive itself, or the hint of the gradient passes.
dnnl::convolution_forward::primitive_desc conv_forward_pd(const SpatialShape& s, int64_t n, bool bias) {
  const memory::desc x = plain(n, s.C, s.H, s.W, Tag::any), w = plain(s.O, s.C, s.kh, s.kw, Tag::any),
                     y = plain(n, s.O, s.Ho, s.Wo, Tag::any);
  const memory::dims stride{s.sh, s.sw}, pad{s.ph, s.pw};
  using F = dnnl::convolution_forward;
  auto d = bias ? F::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w,
                          memory::desc({s.O}, kF32, Tag::x), y, stride, pad, pad)
                : F::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w, y, stride, pad,
                          pad);
  return F::primitive_desc(d, user_scratchpad(), engine());
}

// Input channels below which conv2d_grad_input runs on plain layouts (oneDNN's GEMM convolution): by
// scripts/bench/conv_primitives.sh, the blocked data gradient took 5.1x the plain one's time with 1 channel
// and 1.8x with 3, but 0.9x with 4 and 0.5x with 6 and 8 (docs/benchmarks.md).
constexpr int64_t kBlockedGradInputMinChannels = 4;

std::unique_ptr<ChunkPrims> make_chunk(Pass pass, const SpatialShape& s, int64_t n) {
  auto p = std::make_unique<ChunkPrims>();
  const memory::desc xu = plain(n, s.C, s.H, s.W, Tag::nchw), wu = plain(s.O, s.C, s.kh, s.kw, Tag::oihw),
                     yu = plain(n, s.O, s.Ho, s.Wo, Tag::nchw);
  const memory::dims stride{s.sh, s.sw}, pad{s.ph, s.pw};
  memory::desc scratch;
  switch (pass) {
    case Pass::ConvForward: {
      auto pd = conv_forward_pd(s, n, s.bias);
      p->prim = dnnl::convolution_forward(pd);
      p->a = operand(xu, pd.src_desc(), true);
      p->b = operand(wu, pd.weights_desc(), true);
      p->c = operand(yu, pd.dst_desc(), false);
      scratch = pd.scratchpad_desc();
      break;
    }
    case Pass::ConvGradInput: {
      using D = dnnl::convolution_backward_data;
      const bool blocked = s.C >= kBlockedGradInputMinChannels;
      const Tag data = blocked ? Tag::any : Tag::nchw, filt = blocked ? Tag::any : Tag::oihw;
      auto hint = conv_forward_pd(s, n, false);
      auto pd = D::primitive_desc(
          D::desc(dnnl::algorithm::convolution_direct, plain(n, s.C, s.H, s.W, data),
                  plain(s.O, s.C, s.kh, s.kw, filt), plain(n, s.O, s.Ho, s.Wo, data), stride, pad, pad),
          user_scratchpad(), engine(), hint);
      p->prim = D(pd);
      p->a = operand(yu, pd.diff_dst_desc(), true);
      p->b = operand(wu, pd.weights_desc(), true);
      p->c = operand(xu, pd.diff_src_desc(), false);
      scratch = pd.scratchpad_desc();
      break;
    }
    case Pass::ConvGradWeight: {
      using W = dnnl::convolution_backward_weights;
      auto hint = conv_forward_pd(s, n, false);
      auto pd = W::primitive_desc(
          W::desc(dnnl::algorithm::convolution_direct, plain(n, s.C, s.H, s.W, Tag::any),
                  plain(s.O, s.C, s.kh, s.kw, Tag::any), plain(n, s.O, s.Ho, s.Wo, Tag::any), stride, pad, pad),
          user_scratchpad(), engine(), hint);
      p->prim = W(pd);
      p->a = operand(xu, pd.src_desc(), true);
      p->b = operand(yu, pd.diff_dst_desc(), true);
      p->c = operand(wu, pd.diff_weights_desc(), false);
      scratch = pd.scratchpad_desc();
      break;
    }
    case Pass::AvgPoolForward:
    case Pass::AvgPoolBackward: {
      const memory::desc pu = plain(n, s.C, s.Ho, s.Wo, Tag::nchw);
      const memory::dims kernel{s.kh, s.kw};
      using F = dnnl::pooling_forward;
      using B = dnnl::pooling_backward;
      const auto alg = dnnl::algorithm::pooling_avg_include_padding;
      auto fpd = F::primitive_desc(F::desc(dnnl::prop_kind::forward_training, alg, xu, pu, stride, kernel, pad, pad),
                                   user_scratchpad(), engine());
      if (pass == Pass::AvgPoolForward) {
        p->prim = F(fpd);
        p->a = operand(xu, fpd.src_desc(), true);
        p->c = operand(pu, fpd.dst_desc(), false);
        scratch = fpd.scratchpad_desc();
      } else {
        auto bpd = B::primitive_desc(B::desc(alg, xu, pu, stride, kernel, pad, pad), user_scratchpad(), engine(), fpd);
        p->prim = B(bpd);
        p->a = operand(pu, bpd.diff_dst_desc(), true);
        p->c = operand(xu, bpd.diff_src_desc(), false);
        scratch = bpd.scratchpad_desc();
      }
      BRAID_ASSERT(!p->a.reordered && !p->c.reordered, "oneDNN pooling chose a layout other than NCHW");
      break;
    }
  }
  ++g_created;
  // The chunk's region: blocked copies of its data operands (weights are shared: see PassPlan), the weight
  // gradient's blocked partial, and the scratchpad.
  Packer r;
  const bool weights_in_b = pass == Pass::ConvForward || pass == Pass::ConvGradInput;
  if (p->a.reordered) p->a.offset = r.take(p->a.prim.get_size());
  if (p->b.reordered && !weights_in_b) p->b.offset = r.take(p->b.prim.get_size());
  if (p->c.reordered) p->c.offset = r.take(p->c.prim.get_size());
  p->scratch = scratch.get_size();
  if (p->scratch) p->scratch_offset = r.take(p->scratch);
  p->region = r.bytes;
  return p;
}

std::unique_ptr<PassPlan> make_plan(Pass pass, const SpatialShape& s) {
  auto plan = std::make_unique<PassPlan>();
  plan->chunks = batch_chunks(s.B);
  BRAID_ASSERT(plan->chunks.count > 0, "oneDNN ", s.B, " samples");
  OneThread one;
  plan->main = make_chunk(pass, s, plan->chunks.per);
  if (plan->chunks.tail != plan->chunks.per) plan->tail = make_chunk(pass, s, plan->chunks.tail);
  Packer ws;
  // Blocked weights (forward, grad_input): one copy per distinct layout the main and tail primitives want.
  if (pass == Pass::ConvForward || pass == Pass::ConvGradInput) {
    const Operand &m = plan->main->b, *t = plan->tail ? &plan->tail->b : nullptr;
    if (m.reordered) plan->weights_main = ws.take(m.prim.get_size());
    if (t && t->reordered)
      plan->weights_tail = m.reordered && t->prim == m.prim ? plan->weights_main : ws.take(t->prim.get_size());
  }
  // The weight gradient's partial of chunk c >= 1 in OIHW (chunk 0's goes straight to dw).
  const size_t dw_bytes = static_cast<size_t>(s.O * s.C * s.kh * s.kw) * sizeof(float);
  for (int64_t c = 0; c < plan->chunks.count; ++c) {
    plan->chunk_offset.push_back(ws.take(plan->prims(c).region));
    if (pass == Pass::ConvGradWeight && c > 0) ws.take(dw_bytes);
  }
  plan->bytes = ws.bytes;
  return plan;
}

// The key of a pass: the weight gradient ignores the bias; pooling has no output channels.
SpatialShape key_shape(Pass pass, SpatialShape s) {
  if (pass == Pass::ConvGradInput || pass == Pass::ConvGradWeight) s.bias = false;
  if (pass == Pass::AvgPoolForward || pass == Pass::AvgPoolBackward) s.O = 0, s.bias = false;
  return s;
}

// Plans by (pass, shape), made on first use and kept for the process (nullptr where oneDNN has no primitive
// for the shape); safe to use from any thread.
const PassPlan* plan_of(Pass pass, const SpatialShape& shape) {
  const SpatialShape s = key_shape(pass, shape);
  using Key = std::array<int64_t, 15>;
  const Key key{static_cast<int64_t>(pass), s.B, s.C, s.H, s.W, s.O, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.Ho, s.Wo,
                s.bias ? 1 : 0};
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<PassPlan>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  std::unique_ptr<PassPlan> plan;
  try {
    LibraryCall call;
    plan = make_plan(pass, s);
  } catch (const dnnl::error& e) {
    static const char* names[] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "avg_pool2d", "avg_pool2d_grad"};
    std::fprintf(stderr, "braid: note: oneDNN has no %s for %s (%s); it runs on braid's own kernel for this shape\n",
                 names[static_cast<int>(pass)], shape_str(s).c_str(), e.what());
  }
  return plans.emplace(key, std::move(plan)).first->second.get();
}

const PassPlan& must_plan(Pass pass, const SpatialShape& s) {
  const PassPlan* p = plan_of(pass, s);
  BRAID_ASSERT(p != nullptr, "oneDNN pass ", static_cast<int>(pass), " called for ", shape_str(s),
               ", which it has no primitive for (check onednn_workspace first)");
  return *p;
}

char* region(void* ws, size_t ws_bytes, const PassPlan& plan, const SpatialShape& s) {
  BRAID_ASSERT(plan.bytes == 0 || (ws != nullptr && ws_bytes >= plan.bytes), "oneDNN workspace too small: ", ws_bytes,
               " bytes, needs ", plan.bytes, " for ", shape_str(s));
  return static_cast<char*>(ws);
}

memory wrap(const memory::desc& d, const void* p) { return memory(d, engine(), const_cast<void*>(p)); }

void execute(const dnnl::primitive& prim, std::initializer_list<std::pair<int, const memory*>> list) {
  std::array<dnnl_exec_arg_t, 6> args{};
  int n = 0;
  for (const auto& [arg, m] : list)
    if (*m) args[static_cast<size_t>(n++)] = {arg, m->get()};  // an empty memory: no such argument
  dnnl::error::wrap_c_api(dnnl_primitive_execute(prim.get(), stream().get(), n, args.data()), "primitive execute");
}

// The primitive's view of an input operand at user pointer u: u itself, or its copy at region + offset.
memory input(const Operand& op, const void* u, char* region) {
  memory m = wrap(op.user, u);
  if (!op.reordered) return m;
  memory blocked = wrap(op.prim, region + op.offset);
  execute(op.reorder, {{DNNL_ARG_FROM, &m}, {DNNL_ARG_TO, &blocked}});
  return blocked;
}
// An output operand: written straight to u, or to region + offset and reordered by finish().
memory output(const Operand& op, void* u, char* region) {
  return op.reordered ? wrap(op.prim, region + op.offset) : wrap(op.user, u);
}
void finish(const Operand& op, const memory& m, void* u) {
  if (!op.reordered) return;
  memory user = wrap(op.user, u);
  execute(op.reorder, {{DNNL_ARG_FROM, &m}, {DNNL_ARG_TO, &user}});
}

// Reorders the weights w into each blocked layout the chunks use (once per call; twice when the tail
// primitive's differs).
void weights_for_chunks(const PassPlan& plan, const float* w, char* ws) {
  auto one = [&](const Operand& b, size_t at) {
    memory from = wrap(b.user, w), to = wrap(b.prim, ws + at);
    execute(b.reorder, {{DNNL_ARG_FROM, &from}, {DNNL_ARG_TO, &to}});
  };
  const ChunkPrims* m = plan.main.get();
  if (m->b.reordered) one(m->b, plan.weights_main);
  const ChunkPrims* t = plan.tail.get();
  if (t && t->b.reordered && !(m->b.reordered && plan.weights_tail == plan.weights_main)) one(t->b, plan.weights_tail);
}
memory chunk_weights(const PassPlan& plan, const ChunkPrims& p, const float* w, char* ws) {
  if (!p.b.reordered) return wrap(p.b.user, w);
  return wrap(p.b.prim, ws + (&p == plan.main.get() ? plan.weights_main : plan.weights_tail));
}

// The chunk's scratchpad (an empty memory where it needs none).
memory scratchpad(const ChunkPrims& p, char* r) {
  if (!p.scratch) return memory();
  return wrap(memory::desc({static_cast<int64_t>(p.scratch)}, memory::data_type::u8, Tag::x), r + p.scratch_offset);
}

// fn(chunk, its first sample, its primitives, its region) for every chunk: chunks spread over the OpenMP
// threads, each run with one thread. A oneDNN error inside the parallel region is reported after it.
template <typename F>
void for_chunks(const char* what, const SpatialShape& s, const PassPlan& plan, char* ws, const F& fn) {
  std::atomic<bool> failed{false};
  std::string message;
  std::mutex mu;
  parallel_for(plan.chunks.count, 1, [&](int64_t c0, int64_t c1) {
    OneThread one;
    LibraryCall call;
    for (int64_t c = c0; c < c1; ++c) {
      try {
        fn(c, c * plan.chunks.per, plan.prims(c), ws + plan.chunk_offset[static_cast<size_t>(c)]);
      } catch (const dnnl::error& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed.exchange(true))
          message = std::string(e.what()) + " (status " + std::to_string(static_cast<int>(e.status)) + ")";
      }
    }
  });
  BRAID_ASSERT(!failed.load(), "oneDNN ", what, " failed for ", shape_str(s), ": ", message);
}

}  // namespace

std::optional<size_t> onednn_workspace(SpatialPass pass, const SpatialShape& s) {
  const PassPlan* p = plan_of(pass, s);
  if (!p) return std::nullopt;
  return p->bytes;
}

// Reorders the weights once, in the calling thread, when a chunk's primitive wants another layout.
void reorder_weights(const char* what, const SpatialShape& s, const PassPlan& plan, const float* w, char* ws) {
  OneThread one;
  LibraryCall call;
  try {
    weights_for_chunks(plan, w, ws);
  } catch (const dnnl::error& e) {
    BRAID_ASSERT(false, "oneDNN ", what, " (weights reorder) failed for ", shape_str(s), ": ", e.what());
  }
}

void onednn_conv_forward(const SpatialShape& s, const float* x, const float* w, const float* b, float* y, void* ws,
                         size_t ws_bytes, const std::function<void(int64_t, int64_t)>& after) {
  BRAID_ASSERT(s.bias == (b != nullptr), "onednn_conv_forward: bias ", s.bias, " but pointer ", b != nullptr);
  const PassPlan& plan = must_plan(Pass::ConvForward, s);
  char* base = region(ws, ws_bytes, plan, s);
  reorder_weights("conv2d", s, plan, w, base);
  const int64_t xs = s.C * s.H * s.W, ys = s.O * s.Ho * s.Wo;
  for_chunks("conv2d", s, plan, base, [&](int64_t c, int64_t b0, const ChunkPrims& p, char* r) {
    const memory src = input(p.a, x + b0 * xs, r), wei = chunk_weights(plan, p, w, base),
                 dst = output(p.c, y + b0 * ys, r), sp = scratchpad(p, r);
    if (b) {
      const memory bias = wrap(memory::desc({s.O}, kF32, Tag::x), b);
      execute(p.prim, {{DNNL_ARG_SRC, &src}, {DNNL_ARG_WEIGHTS, &wei}, {DNNL_ARG_BIAS, &bias}, {DNNL_ARG_DST, &dst},
                       {DNNL_ARG_SCRATCHPAD, &sp}});
    } else {
      execute(p.prim, {{DNNL_ARG_SRC, &src}, {DNNL_ARG_WEIGHTS, &wei}, {DNNL_ARG_DST, &dst}, {DNNL_ARG_SCRATCHPAD, &sp}});
    }
    finish(p.c, dst, y + b0 * ys);
    if (after) after(b0, c == plan.chunks.count - 1 ? plan.chunks.tail : plan.chunks.per);
  });
}

void onednn_conv_grad_input(const SpatialShape& s, const float* dy, const float* w, float* dx, void* ws,
                            size_t ws_bytes) {
  const PassPlan& plan = must_plan(Pass::ConvGradInput, s);
  char* base = region(ws, ws_bytes, plan, s);
  reorder_weights("conv2d_grad_input", s, plan, w, base);
  const int64_t xs = s.C * s.H * s.W, ys = s.O * s.Ho * s.Wo;
  for_chunks("conv2d_grad_input", s, plan, base, [&](int64_t, int64_t b0, const ChunkPrims& p, char* r) {
    const memory ddst = input(p.a, dy + b0 * ys, r), wei = chunk_weights(plan, p, w, base),
                 dsrc = output(p.c, dx + b0 * xs, r), sp = scratchpad(p, r);
    execute(p.prim,
            {{DNNL_ARG_DIFF_DST, &ddst}, {DNNL_ARG_WEIGHTS, &wei}, {DNNL_ARG_DIFF_SRC, &dsrc}, {DNNL_ARG_SCRATCHPAD, &sp}});
    finish(p.c, dsrc, dx + b0 * xs);
  });
}

void onednn_conv_grad_weight(const SpatialShape& s, const float* dy, const float* x, float* dw, void* ws,
                             size_t ws_bytes) {
  const PassPlan& plan = must_plan(Pass::ConvGradWeight, s);
  char* base = region(ws, ws_bytes, plan, s);
  const int64_t xs = s.C * s.H * s.W, ys = s.O * s.Ho * s.Wo, nw = s.O * s.C * s.kh * s.kw;
  // Chunk c's OIHW partial: dw itself for chunk 0, else the slot after the chunk's region (make_plan).
  auto partial = [&](int64_t c) {
    return c == 0 ? dw
                  : reinterpret_cast<float*>(base + plan.chunk_offset[static_cast<size_t>(c)] +
                                             align64(plan.prims(c).region));
  };
  for_chunks("conv2d_grad_weight", s, plan, base, [&](int64_t c, int64_t b0, const ChunkPrims& p, char* r) {
    const memory src = input(p.a, x + b0 * xs, r), ddst = input(p.b, dy + b0 * ys, r),
                 dwei = output(p.c, partial(c), r), sp = scratchpad(p, r);
    execute(p.prim,
            {{DNNL_ARG_SRC, &src}, {DNNL_ARG_DIFF_DST, &ddst}, {DNNL_ARG_DIFF_WEIGHTS, &dwei}, {DNNL_ARG_SCRATCHPAD, &sp}});
    finish(p.c, dwei, partial(c));
  });
  // dw = ((p0 + p1) + p2) + ...: a fixed order whatever the threads.
  if (plan.chunks.count > 1)
    parallel_for(nw, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t c = 1; c < plan.chunks.count; ++c) {
        const float* p = partial(c);
        for (int64_t i = i0; i < i1; ++i) dw[i] += p[i];
      }
    });
}

void onednn_avg_pool_forward(const SpatialShape& s, const float* x, float* y, void* ws, size_t ws_bytes) {
  const PassPlan& plan = must_plan(Pass::AvgPoolForward, s);
  char* base = region(ws, ws_bytes, plan, s);
  const int64_t xs = s.C * s.H * s.W, ys = s.C * s.Ho * s.Wo;
  for_chunks("avg_pool2d", s, plan, base, [&](int64_t, int64_t b0, const ChunkPrims& p, char* r) {
    const memory src = wrap(p.a.user, x + b0 * xs), dst = wrap(p.c.user, y + b0 * ys), sp = scratchpad(p, r);
    execute(p.prim, {{DNNL_ARG_SRC, &src}, {DNNL_ARG_DST, &dst}, {DNNL_ARG_SCRATCHPAD, &sp}});
  });
}

void onednn_avg_pool_backward(const SpatialShape& s, const float* dy, float* dx, void* ws, size_t ws_bytes) {
  const PassPlan& plan = must_plan(Pass::AvgPoolBackward, s);
  char* base = region(ws, ws_bytes, plan, s);
  const int64_t xs = s.C * s.H * s.W, ys = s.C * s.Ho * s.Wo;
  for_chunks("avg_pool2d_grad", s, plan, base, [&](int64_t, int64_t b0, const ChunkPrims& p, char* r) {
    const memory ddst = wrap(p.a.user, dy + b0 * ys), dsrc = wrap(p.c.user, dx + b0 * xs), sp = scratchpad(p, r);
    execute(p.prim, {{DNNL_ARG_DIFF_DST, &ddst}, {DNNL_ARG_DIFF_SRC, &dsrc}, {DNNL_ARG_SCRATCHPAD, &sp}});
  });
}

int64_t onednn_primitives_created() { return g_created.load(); }
#else
int64_t onednn_primitives_created() { return 0; }
#endif

}  // namespace braid::ops::cpu
