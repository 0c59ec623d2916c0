// CudaOptimizer (see cuda_optimizer.h): builds the fused kernels' slot table once, then enqueues axpy and
// adamw / sgd launches on the executor's stream.
#include "backends/cuda/cuda_optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace braid::exec {
namespace {
size_t align256(size_t n) { return (n + 255) / 256 * 256; }
}  // namespace

CudaOptimizer::CudaOptimizer(CudaExecutor& ex, const io::OptimizerSpec& spec, int micro_batches, bool accumulators,
                             const std::function<bool(const std::string&)>& owned, bool owned_grads_only)
    : ex_(ex), spec_(spec), micro_batches_(std::max(micro_batches, 1)), accumulate_(accumulators || micro_batches > 1) {
  if (spec.type != "adamw" && spec.type != "sgd")
    throw UserError(SourceLoc{}, "optimizer '" + spec.type + "' has no device implementation", "use adamw or sgd");
  BRAID_ASSERT(!owned_grads_only || accumulate_, "gradients reduced to their owner need accumulators");
  const graph::Graph& g = ex.graph();
  const bool adamw = spec.type == "adamw", momentum = !adamw && spec.momentum != 0;
  auto mine = [&](const std::string& name) { return !owned || owned(name); };
  auto has_acc = [&](const std::string& name) { return accumulate_ && (!owned_grads_only || mine(name)); };
  size_t bytes = 4096;
  for (const auto& p : g.params())
    if (p.grad.valid()) {
      const int state = (mine(p.name) ? (adamw ? 2 : momentum ? 1 : 0) : 0) + (has_acc(p.name) ? 1 : 0);
      bytes += align256(static_cast<size_t>(g.value(p.grad).desc.numel()) * 4) * static_cast<size_t>(state);
      if (mine(p.name)) ++count_;
    }
  bytes += 2 * (align256(cuda::multi_tensor_table_bytes(count_)) + 256);
  arena_ = std::make_unique<cuda::DeviceArena>(ex.stream().device(), bytes);
  table_ = arena_->take(std::max<size_t>(cuda::multi_tensor_table_bytes(count_), 1), "optimizer table");
  norm_ = static_cast<double*>(arena_->take(sizeof(double), "gradient norm"));
  // The accumulators in one block (each on a 256-byte boundary, the gaps zero), so that data parallelism
  // all-reduces them as one tensor (flat_gradients).
  char* acc_next = nullptr;
  if (accumulate_) {
    size_t acc_bytes = 0;
    for (const auto& p : g.params())
      if (p.grad.valid() && has_acc(p.name)) acc_bytes += align256(static_cast<size_t>(g.value(p.grad).desc.numel()) * 4);
    acc_next = static_cast<char*>(arena_->take(std::max<size_t>(acc_bytes, 4), "gradient accumulators"));
    ex.stream().memset(acc_next, 0, std::max<size_t>(acc_bytes, 4));
    flat_ = Tensor::view(acc_next, TensorDesc{Shape{static_cast<int64_t>(std::max<size_t>(acc_bytes, 4) / 4)}, DType::f32});
  }
  std::vector<cuda::ParamSlot> slots;
  for (const auto& p : g.params()) {
    if (!p.grad.valid()) continue;
    if (!mine(p.name)) {  // ZeRO: another replica updates it; ZeRO-1 still all-reduces its gradient here
      if (has_acc(p.name)) {
        accum_.emplace_back(p.grad, reinterpret_cast<float*>(acc_next));
        acc_next += align256(static_cast<size_t>(g.value(p.grad).desc.numel()) * 4);
      }
      continue;
    }
    const Tensor& w = ex.device_param(p.name);
    const Tensor& grad = ex.device_value(p.grad);
    BRAID_ASSERT(w.dtype() == DType::f32 && grad.dtype() == DType::f32, "device optimizer: ", p.name,
                 " must be f32 (master weights), is ", w.desc().str());
    cuda::ParamSlot s;
    s.n = w.numel();
    s.p = w.data<float>();
    s.p16 = ex.autocast_shadow(s.p);  // under autocast: the GEMMs' 16-bit copy, rewritten with each update
    s.p16_half = s.p16 && ex.autocast_type() == DType::f16 ? 1 : 0;
    const size_t nb = static_cast<size_t>(s.n) * 4;
    auto zeroed = [&](const char* what) {
      auto* q = static_cast<float*>(arena_->take(nb, what));
      ex.stream().memset(q, 0, nb);
      return q;
    };
    if (accumulate_) {
      auto* acc = reinterpret_cast<float*>(acc_next);
      acc_next += align256(nb);
      accum_.emplace_back(p.grad, acc);
      s.g = acc;
    } else {
      s.g = grad.data<float>();
    }
    if (adamw) {
      s.m = zeroed("exp_avg");
      s.v = zeroed("exp_avg_sq");
    } else if (momentum) {
      s.m = zeroed("momentum_buffer");
    }
    max_n_ = std::max(max_n_, s.n);
    slots.push_back(s);
    states_.push_back(State{p.name, s.m, s.v, s.n});
  }
  if (count_ > 0) cuda::upload_slots(ex.stream().ctx(), slots.data(), count_, table_);  // synchronises
  slots_ = slots;
  // Room for set_norm_params' table (at most every slot).
  norm_table_ = arena_->take(std::max<size_t>(cuda::multi_tensor_table_bytes(count_), 1), "norm table");
  norm_count_ = -1;  // not set: the whole table
}

CudaOptimizer::~CudaOptimizer() = default;

size_t CudaOptimizer::device_bytes() const { return arena_->used(); }

void CudaOptimizer::accumulate(int mb, double loss_scale, int slot) {
  if (!accumulate_) {
    BRAID_ASSERT(slot == 0, "one micro-batch a step runs in slot 0 (the update reads its gradients in place)");
    return;
  }
  cuda::Ctx c = ex_.stream().ctx();
  const double k = loss_scale == 1 ? 1.0 / micro_batches_ : 1.0 / (micro_batches_ * loss_scale);
  for (const auto& [grad, acc] : accum_) {
    const Tensor& g = ex_.device_value(grad, slot);
    cuda::axpy(c, DType::f32, g.raw(), acc, g.numel(), k, mb == 0);
  }
}

void CudaOptimizer::accumulate_one(ValueId grad, const Tensor& g, int mb, double loss_scale) {
  auto it = std::find_if(accum_.begin(), accum_.end(), [&](const auto& a) { return a.first == grad; });
  BRAID_ASSERT(it != accum_.end(), "gradient ", grad.v, " has no accumulator on this replica");
  const double k = loss_scale == 1 ? 1.0 / micro_batches_ : 1.0 / (micro_batches_ * loss_scale);
  cuda::axpy(ex_.stream().ctx(), DType::f32, g.raw(), it->second, g.numel(), k, mb == 0);
}

void CudaOptimizer::step(double lr) {
  cuda::Ctx c = ex_.stream().ctx();
  // A replica that owns no parameter of this stage (ZeRO) updates nothing but counts the step.
  if (count_ > 0 && spec_.type == "adamw")
    cuda::adamw(c, table_, count_, max_n_, lr, spec_.betas[0], spec_.betas[1], spec_.eps, spec_.weight_decay,
                step_ + 1);
  else if (count_ > 0)
    cuda::sgd(c, table_, count_, max_n_, lr, spec_.momentum, spec_.dampening, spec_.weight_decay, spec_.nesterov,
              step_ == 0);
  ++step_;
}

double CudaOptimizer::grad_norm() { return std::sqrt(grad_sum_squares()); }

double CudaOptimizer::grad_sum_squares() {
  if (norm_count_ == 0) return 0;
  if (count_ == 0) return 0;
  if (norm_count_ < 0) cuda::grad_sum_squares(ex_.stream().ctx(), table_, count_, max_n_, norm_);
  else cuda::grad_sum_squares(ex_.stream().ctx(), norm_table_, norm_count_, max_n_, norm_);
  double sum = 0;
  ex_.stream().download(&sum, norm_, sizeof sum);
  return sum;
}

void CudaOptimizer::set_norm_params(const std::function<bool(const std::string&)>& counted) {
  std::vector<cuda::ParamSlot> subset;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (counted(states_[i].name)) subset.push_back(slots_[i]);
  norm_count_ = static_cast<int>(subset.size());
  if (!subset.empty()) cuda::upload_slots(ex_.stream().ctx(), subset.data(), norm_count_, norm_table_);
}

void CudaOptimizer::scale_grads(double k) {
  if (count_ > 0) cuda::grad_scale(ex_.stream().ctx(), table_, count_, max_n_, k);
}

namespace {
// The host optimizer's state tensor `key` of parameter `name` (f32, n elements), or an internal error.
template <typename StateMap>
auto& host_state(StateMap& state, const std::string& name, const char* key, int64_t n) {
  auto p = state.find(name);
  BRAID_ASSERT(p != state.end() && p->second.count(key), "host optimizer has no ", key, " for ", name);
  auto& t = p->second.at(key);
  BRAID_ASSERT(t.numel() == n && t.dtype() == DType::f32, "host optimizer's ", key, " of ", name, " is ", t.desc().str());
  return t;
}
}  // namespace

template <typename StateMap, typename Copy>
void CudaOptimizer::each_state(StateMap& state, const Copy& copy) const {
  const bool adamw = spec_.type == "adamw";
  for (const State& s : states_) {
    const size_t nb = static_cast<size_t>(s.n) * 4;
    if (s.m) copy(host_state(state, s.name, adamw ? "exp_avg" : "momentum_buffer", s.n).raw(), s.m, nb);
    if (s.v) copy(host_state(state, s.name, "exp_avg_sq", s.n).raw(), s.v, nb);
  }
}

void CudaOptimizer::download(Optimizer& host) const {
  each_state(host.state(), [&](void* h, const float* d, size_t nb) { ex_.stream().download(h, d, nb); });
  host.set_steps_taken(step_);
}

void CudaOptimizer::upload(const Optimizer& host) {
  step_ = host.steps_taken();
  if (step_ == 0) return;  // the device state is zero, as a fresh optimizer's
  each_state(host.state(), [&](const void* h, float* d, size_t nb) { ex_.stream().upload(d, h, nb); });
  ex_.stream().synchronize();
}

}  // namespace braid::exec
