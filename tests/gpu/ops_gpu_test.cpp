// Every op on CUDA against its CPU kernel, from the registry's samples (as tests/ops/registry_suite_test.cpp):
// the forward of each sample, and its backward as the gradient rule emits it (every emitted op run eagerly
// on the GPU, the CPU run eagerly by tests/ops/op_harness). f32 within 1e-5 relative (|gpu - cpu| <=
// 1e-5 (|cpu| + 1)); integer outputs and mutated buffers compared too. No per-op code here. The *Bf16Autocast
// variants (and *F16Autocast, fp16 operands) run the same with bf16 autocast on (every GEMM on bf16 operands, fp32 accumulation and results;
// cuda::Ctx::autocast) against the CPU in f32 within 1e-2 relative in L2 norm per tensor (see expect_close).
#include <cmath>

#include "../ops/op_harness.h"
#include "gpu_util.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/launch.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

constexpr double kRtol = 1e-5, kRtolBf16 = 1e-2;

// GradBuilder that runs every emitted op's CUDA kernel at once on device tensors.
class GpuEager : public GradBuilder {
 public:
  // autocast: f32 (none), bf16 or f16 (cuda::Ctx::autocast_type).
  GpuEager(Device& dev, DType autocast) : dev_(dev), autocast_(autocast) {}
  ValueId add(Tensor t) {
    vals_.push_back(std::move(t));
    return ValueId(static_cast<int32_t>(vals_.size() - 1));
  }
  std::vector<ValueId> emit(const std::string& op, const Attrs& attrs_in, const std::vector<ValueId>& inputs) override {
    const OpDef& def = Registry::get().at(op);
    Attrs attrs = attrs_in;
    complete_attrs(def, attrs);
    std::vector<TensorDesc> descs;
    std::vector<Tensor> in;
    for (auto v : inputs) {
      descs.push_back(desc(v));
      in.push_back(val(v));
    }
    auto out_descs = def.infer(attrs, descs);
    std::vector<Tensor> out;
    for (const auto& d : out_descs) {
      out.push_back(dev_.alloc(d));
      dev_.stream.memset(out.back().raw(), 0xff, d.bytes());  // NaN garbage: kernels must write everything
    }
    const CudaOp* k = cuda_op(def);
    if (k == nullptr) throw InternalError("op " + op + " has no CUDA kernel");
    CudaCtx c = dev_.stream.ctx();
    c.training = ctx.training;
    c.rng_key = ctx.rng_key;
    c.batch_offset = ctx.batch_offset;
    c.shard_axis = ctx.shard_axis;
    c.shard_start = ctx.shard_start;
    c.shard_full = ctx.shard_full;
    c.workspace_bytes = cuda_workspace_bytes(def, attrs, descs, out_descs);
    if (c.workspace_bytes) c.workspace = dev_.arena.take(c.workspace_bytes, "workspace");
    if (autocast_ != DType::f32) {
      c.autocast_bytes = cuda_autocast_bytes(descs, out_descs, c.workspace_bytes);
      c.autocast = dev_.arena.take(c.autocast_bytes, "autocast");
      c.autocast_type = autocast_;
    }
    k->fn(c, attrs, in, out);
    std::vector<ValueId> ids;
    for (auto& t : out) ids.push_back(add(t));
    return ids;
  }
  const TensorDesc& desc(ValueId v) const override { return vals_.at(v.idx()).desc(); }
  const Tensor& val(ValueId v) const { return vals_.at(v.idx()); }
  KernelCtx ctx;

 private:
  Device& dev_;
  DType autocast_;
  std::vector<Tensor> vals_;
};

// f32: every element within rtol (|cpu| + 1). bf16 autocast: the tensor within 1e-2 relative in L2
// (||gpu - cpu|| <= 1e-2 ||cpu|| + 1e-5 sqrt(n)), and every element within 5e-2 (|cpu| + 1) so that a
// localised error (a wrong row) cannot hide in the norm; bf16 rounds each GEMM operand by up to 2^-9.
void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what, double rtol, bool bf16 = false) {
  ASSERT_EQ(gpu.desc(), cpu.desc()) << what;
  const double elem_tol = bf16 ? 5e-2 : rtol;
  int bad = 0;
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < cpu.numel() && bad < 5; ++i) {
    double g, c;
    if (is_float(cpu.dtype())) {
      g = get_as_double(gpu, i);
      c = get_as_double(cpu, i);
    } else {
      g = static_cast<double>(cpu.dtype() == DType::i64 ? gpu.data<int64_t>()[i] : gpu.data<int32_t>()[i]);
      c = static_cast<double>(cpu.dtype() == DType::i64 ? cpu.data<int64_t>()[i] : cpu.data<int32_t>()[i]);
    }
    diff2 += (g - c) * (g - c);
    ref2 += c * c;
    if (!(std::abs(g - c) <= elem_tol * (std::abs(c) + 1))) {
      ADD_FAILURE() << what << " element " << i << ": gpu " << g << ", cpu " << c;
      ++bad;
    }
  }
  if (bf16 && bad == 0) {
    const double lim = rtol * std::sqrt(ref2) + 1e-5 * std::sqrt(static_cast<double>(cpu.numel()));
    EXPECT_LE(std::sqrt(diff2), lim) << what << ": relative L2 error " << std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  }
}

std::vector<Tensor> upload_all(Device& dev, const std::vector<Tensor>& host) {
  std::vector<Tensor> out;
  for (const auto& t : host) out.push_back(dev.upload(t));
  return out;
}

}  // namespace

// Runs everywhere (no device needed): the table covers every op of the registry but the comm_* ops, and the
// backend's supports() answers yes for each at f32 and bf16, no at f64.
TEST(CudaKernels, EveryRegistryOpHasOne) {
  int covered = 0;
  for (const auto* d : Registry::get().all()) {
    EXPECT_TRUE(cuda_supports(*d, DType::f32)) << "op " << d->name << " at f32";
    EXPECT_TRUE(cuda_supports(*d, DType::bf16)) << "op " << d->name << " at bf16";
    if (d->collective) {
      EXPECT_EQ(cuda_op(*d), nullptr) << d->name << ": comm_* ops run on a Communicator";
      continue;
    }
    EXPECT_FALSE(cuda_supports(*d, DType::f64)) << "op " << d->name << ": CUDA kernels take f32 and bf16";
    EXPECT_NE(cuda_op(*d), nullptr) << "op " << d->name << " has no CUDA kernel";
    ++covered;
  }
  EXPECT_GT(covered, 50);
  for (const auto& name : cuda_kernel_names()) EXPECT_NE(Registry::get().find(name), nullptr) << name;
}

using Case = std::pair<const OpDef*, Sample>;

// Every public op's registry samples.
static std::vector<Case> registry_cases() {
  std::vector<Case> cases;
  for (const auto* d : public_ops())
    for (const auto& s : d->samples()) cases.emplace_back(d, s);
  return cases;
}

static void check_forward(DType autocast, const std::vector<Case>& cases = registry_cases()) {
  const bool bf16 = autocast != DType::f32;  // autocast's tolerances (fp16's 10-bit mantissa is within bf16's)
  const double rtol = bf16 ? kRtolBf16 : kRtol;
  Device dev;
  Rng rng(11, 3);
  for (const auto& [d, s] : cases) {
    {
      SCOPED_TRACE(d->name + "/" + s.name);
      dev.arena.reset();
      Instance inst = instantiate(*d, s, DType::f32, rng);
      std::vector<Tensor> cpu_in;
      for (const auto& t : inst.inputs) cpu_in.push_back(t.clone());
      auto cpu_out = run_forward(Instance{inst});  // run_forward clones the inputs it mutates
      GpuEager g(dev, autocast);
      g.ctx.training = true;
      g.ctx.rng_key = 7;
      g.ctx.batch_offset = inst.batch_offset;
      std::vector<ValueId> ids;
      for (auto& t : upload_all(dev, cpu_in)) ids.push_back(g.add(t));
      auto outs = g.emit(d->name, inst.attrs, ids);
      ASSERT_EQ(outs.size(), cpu_out.size());
      for (size_t k = 0; k < outs.size(); ++k)
        expect_close(dev.download(g.val(outs[k])), cpu_out[k], "output " + std::to_string(k), rtol, bf16);
      // Buffers the op mutates (batch norm's running statistics) against the CPU kernel's update.
      if (!d->mutated_inputs.empty()) {
        Instance again = inst;
        for (auto& t : again.inputs) t = t.clone();
        Eager e;
        e.ctx.training = true;
        e.ctx.rng_key = 7;
        std::vector<ValueId> cin;
        for (const auto& t : again.inputs) cin.push_back(e.add(t));
        e.emit(d->name, inst.attrs, cin);
        for (int m : d->mutated_inputs)
          expect_close(dev.download(g.val(ids[static_cast<size_t>(m)])), e.val(cin[static_cast<size_t>(m)]),
                       "mutated input " + std::to_string(m), rtol, bf16);
      }
    }
  }
}

static void check_backward(DType autocast, const std::vector<Case>& cases = registry_cases()) {
  const bool bf16 = autocast != DType::f32;
  const double rtol = bf16 ? kRtolBf16 : kRtol;
  Device dev;
  Rng rng(12, 4);
  for (const auto& [d, s] : cases) {
    if (!d->differentiable) continue;
    {
      SCOPED_TRACE(d->name + "/" + s.name);
      dev.arena.reset();
      Instance inst = instantiate(*d, s, DType::f32, rng);
      auto out0 = run_forward(inst)[0];
      Tensor dy = Tensor::empty(out0.desc());
      for (int64_t i = 0; i < dy.numel(); ++i) set_from_double(dy, i, rng.uniform(-1, 1));
      auto cpu_grads = run_backward(inst, dy);
      // The same on the GPU: forward, then the gradient rule with every emitted op on the device.
      GpuEager g(dev, autocast);
      g.ctx.training = true;
      g.ctx.rng_key = 7;
      g.ctx.batch_offset = inst.batch_offset;
      std::vector<ValueId> in;
      for (const auto& t : inst.inputs) in.push_back(g.add(dev.upload(t.clone())));
      auto out = g.emit(d->name, inst.attrs, in);
      GradCtx c{g, inst.attrs, in, out, std::vector<ValueId>(out.size(), kNoValue), {},
                std::vector<ValueId>(in.size(), kNoValue), d->name};
      c.dout[0] = g.add(dev.upload(dy));
      for (size_t i = 0; i < in.size(); ++i) c.needs.push_back(inst.differentiable_input(static_cast<int>(i)));
      d->grad(c);
      for (size_t i = 0; i < in.size(); ++i) {
        if (!cpu_grads[i].defined() || cpu_grads[i].raw() == nullptr) continue;
        ASSERT_TRUE(c.din[i].valid()) << "no gradient of input " << i << " on GPU";
        expect_close(dev.download(g.val(c.din[i])), cpu_grads[i], "gradient of input " + std::to_string(i), rtol, bf16);
      }
    }
  }
}

TEST(CudaOps, ForwardMatchesCpu) {
  BRAID_REQUIRE_GPU();
  check_forward(DType::f32);
}

TEST(CudaOps, BackwardMatchesCpu) {
  BRAID_REQUIRE_GPU();
  check_backward(DType::f32);
}

TEST(CudaOps, ForwardMatchesCpuBf16Autocast) {
  BRAID_REQUIRE_GPU();
  check_forward(DType::bf16);
}

TEST(CudaOps, BackwardMatchesCpuBf16Autocast) {
  BRAID_REQUIRE_GPU();
  check_backward(DType::bf16);
}

// fp16 autocast (precision f16): the same walk, GEMM operands in fp16.
TEST(CudaOps, ForwardMatchesCpuF16Autocast) {
  BRAID_REQUIRE_GPU();
  check_forward(DType::f16);
}

TEST(CudaOps, BackwardMatchesCpuF16Autocast) {
  BRAID_REQUIRE_GPU();
  check_backward(DType::f16);
}

// The fused (flash) attention kernels (backends/cuda/kernels/flash_attention.cu), which autocast runs take for head dims 32,
// 64 and 128; the registry's samples (head dims 2 to 8) take the staged path. Sequences that are not a multiple
// of the 64-row tile, causal and not, with dropout (the mask drawn again in both backward kernels), against the
// CPU in f32 with the autocast tolerances; then the staged path of the same GPU build, which must agree too.
static std::vector<Case> flash_cases() {
  const OpDef* d = &Registry::get().at("attention");
  auto c = [&](const std::string& name, int64_t b, int64_t t, int64_t dm, int64_t heads, bool causal, double p) {
    return Case{d, Sample{name,
                          {{"heads", heads}, {"causal", causal}, {"bias", true}, {"dropout", p}},
                          {{TensorDesc{Shape{b, t, dm}}}}}};
  };
  // Grouped-query attention and rotary embeddings (attention_gqa_forward/backward in attention.cu: the rows expanded
  // to multi-head ones around the same kernels, q and k rotated in place).
  auto g = [&](const std::string& name, int64_t b, int64_t t, int64_t dm, int64_t heads, int64_t kv, double theta,
               bool causal, double p) {
    return Case{d, Sample{name,
                          {{"heads", heads}, {"kv_heads", kv}, {"rope_theta", theta}, {"causal", causal}, {"bias", true},
                           {"dropout", p}},
                          {{TensorDesc{Shape{b, t, dm}}}}}};
  };
  return {c("dh64_causal_t130", 2, 130, 128, 2, true, 0.0), c("dh64_t100_dropout", 2, 100, 128, 2, false, 0.2),
          c("dh64_causal_t100_dropout", 2, 100, 128, 2, true, 0.2),
          c("dh32_causal_t64_dropout", 1, 64, 128, 4, true, 0.1), c("dh128_causal_t70", 2, 70, 256, 2, true, 0.0),
          c("dh64_causal_t1", 3, 1, 64, 1, true, 0.0),
          g("dh32_kv2_rope_causal_t70", 2, 70, 128, 4, 2, 10000.0, true, 0.0),
          g("dh64_kv1_rope_t100_dropout", 2, 100, 256, 4, 1, 500000.0, false, 0.2),
          g("dh64_mha_rope_causal_t65", 1, 65, 128, 2, 2, 10000.0, true, 0.1)};
}

TEST(FlashAttention, MatchesCpuBf16AndF16) {
  BRAID_REQUIRE_GPU();
  cuda::set_flash_attention(true);
  check_forward(DType::bf16, flash_cases());
  check_backward(DType::bf16, flash_cases());
  check_forward(DType::f16, flash_cases());
  check_backward(DType::f16, flash_cases());
}

TEST(FlashAttention, StagedPathMatchesCpuOnTheSameCases) {
  BRAID_REQUIRE_GPU();
  cuda::set_flash_attention(false);
  check_forward(DType::bf16, flash_cases());
  check_backward(DType::bf16, flash_cases());
  cuda::set_flash_attention(true);
}

// Sequence parallelism: dropout on a part of the sequence axis (cuda::Ctx::shard_*, set by the executor for a node
// split on axis 1) draws the unsplit tensor's mask for that part, as the CPU kernel does: each half of [3, 8, 16]
// (batch offset 2: the samples of a data-parallel rank) equals the same half of the CPU's unsplit run, forward and
// dropout_grad.
TEST(CudaOps, DropoutOnASequenceShardDrawsTheUnsplitMask) {
  BRAID_REQUIRE_GPU();
  Device dev;
  Rng rng(5, 1);
  const int64_t B = 3, T = 8, D = 16, parts = 2;
  for (const std::string op : {"dropout", "dropout_grad"}) {
    SCOPED_TRACE(op);
    Tensor whole = Tensor::empty(TensorDesc{Shape{B, T, D}});
    for (int64_t i = 0; i < whole.numel(); ++i) whole.data<float>()[i] = static_cast<float>(rng.uniform() + 0.5);
    Eager e;
    e.ctx.training = true;
    e.ctx.rng_key = 99;
    e.ctx.batch_offset = 2;
    const Tensor cpu = e.val(e.emit(op, {{"p", 0.3}, {"rng_node", std::string("d")}}, {e.add(whole.clone())})[0]);
    for (int64_t r = 0; r < parts; ++r) {
      const int64_t len = T / parts;
      Tensor part = Tensor::empty(TensorDesc{Shape{B, len, D}}), want = Tensor::empty(TensorDesc{Shape{B, len, D}});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t k = 0; k < D; ++k) {
            part.data<float>()[(b * len + t) * D + k] = whole.data<float>()[(b * T + r * len + t) * D + k];
            want.data<float>()[(b * len + t) * D + k] = cpu.data<float>()[(b * T + r * len + t) * D + k];
          }
      GpuEager g(dev, DType::f32);
      g.ctx.training = true;
      g.ctx.rng_key = 99;
      g.ctx.batch_offset = 2;
      g.ctx.shard_axis = 1;
      g.ctx.shard_start = r * len;
      g.ctx.shard_full = T;
      auto out = g.emit(op, {{"p", 0.3}, {"rng_node", std::string("d")}}, {g.add(dev.upload(part))});
      expect_close(dev.download(g.val(out[0])), want, "part " + std::to_string(r), 0.0);
    }
  }
}
