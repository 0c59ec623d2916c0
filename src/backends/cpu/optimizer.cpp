// SGD and AdamW updates in the order PyTorch performs them (fp32 arithmetic, as torch on CPU), one pass over
// each parameter, split across the OpenMP threads.
#include "backends/cpu/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {
namespace {
// Elements per parallel chunk of the update loops: every element is updated independently, so the result
// does not depend on the chunking (bit-identical for any thread count).
constexpr int64_t kGrain = 1 << 15;
}  // namespace

Optimizer::Optimizer(const io::OptimizerSpec& spec, ParamStore& store, std::function<bool(const std::string&)> owned)
    : spec_(spec), store_(store), owned_(std::move(owned)) {
  for (auto& e : store_.entries()) {
    if (e.spec.buffer || (owned_ && !owned_(e.name))) continue;
    auto& st = state_[e.name];
    if (spec_.type == "adamw") {
      st["exp_avg"] = Tensor::empty(e.value.desc());
      st["exp_avg_sq"] = Tensor::empty(e.value.desc());
    } else if (spec_.momentum != 0) {
      st["momentum_buffer"] = Tensor::empty(e.value.desc());
    }
  }
}

// The loop body with the options as compile-time constants, so that the loop has no branch and vectorises.
template <typename T, bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_range(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t b, int64_t e, T wd, T mom, T damp,
               T lrt) {
  for (int64_t i = b; i < e; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      if constexpr (kFirst) buf[i] = d;
      else buf[i] = mom * buf[i] + (T(1) - damp) * d;
      if constexpr (kNesterov) d = d + mom * buf[i];
      else d = buf[i];
    }
    p[i] = p[i] - lrt * d;
  }
}

// The loop body with the options as compile-time constants, so that the loop has no branch and vectorises
// (per vector width: cpu_vec, core/cpu_isa.h).
template <typename T, bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
static void sgd_loop(T* p, const T* g, T* buf, int64_t n, T wd, T mom, T damp, T lrt) {
  parallel_for(n, kGrain, [=](int64_t b, int64_t e) {
    cpu_vec([&] { sgd_range<T, kDecay, kMomentum, kNesterov, kFirst>(p, g, buf, b, e, wd, mom, damp, lrt); });
  });
}

template <typename T>
static void sgd_update(T* p, const T* g, T* buf, int64_t n, const io::OptimizerSpec& s, double lr, bool first) {
  const T wd = T(s.weight_decay), mom = T(s.momentum), damp = T(s.dampening), lrt = T(lr);
  auto run = [&]<bool kDecay>() {
    if (s.momentum == 0) return sgd_loop<T, kDecay, false, false, false>(p, g, buf, n, wd, mom, damp, lrt);
    if (s.nesterov) {
      if (first) return sgd_loop<T, kDecay, true, true, true>(p, g, buf, n, wd, mom, damp, lrt);
      return sgd_loop<T, kDecay, true, true, false>(p, g, buf, n, wd, mom, damp, lrt);
    }
    if (first) return sgd_loop<T, kDecay, true, false, true>(p, g, buf, n, wd, mom, damp, lrt);
    return sgd_loop<T, kDecay, true, false, false>(p, g, buf, n, wd, mom, damp, lrt);
  };
  if (s.weight_decay != 0) run.template operator()<true>();
  else run.template operator()<false>();
}

template <typename T>
void adamw_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, int64_t b, int64_t e, T b1,
                 T b2, T eps, T decay, T step_size, T bc2_sqrt) {
  for (int64_t i = b; i < e; ++i) {
    p[i] = p[i] * decay;
    m[i] = m[i] * b1 + g[i] * (T(1) - b1);  // torch 1.13: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    v[i] = v[i] * b2 + g[i] * g[i] * (T(1) - b2);
    T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] - step_size * (m[i] / denom);
  }
}

template <typename T>
static void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const io::OptimizerSpec& s, double lr, int64_t t) {
  const T b1 = T(s.betas[0]), b2 = T(s.betas[1]), eps = T(s.eps);
  const T decay = T(1 - lr * s.weight_decay);
  const double bc1 = 1 - std::pow(s.betas[0], static_cast<double>(t));
  const double bc2 = 1 - std::pow(s.betas[1], static_cast<double>(t));
  const T step_size = T(lr / bc1), bc2_sqrt = T(std::sqrt(bc2));
  parallel_for(n, kGrain, [=](int64_t b, int64_t e) {  // by value: pointers and constants hoisted
    cpu_vec([&] { adamw_range(p, g, m, v, b, e, b1, b2, eps, decay, step_size, bc2_sqrt); });
  });
}

void Optimizer::step(double lr) {
  ++step_;
  for (auto& e : store_.entries()) {
    if (e.spec.buffer || !e.has_grad || (owned_ && !owned_(e.name))) continue;
    auto& st = state_[e.name];
    ops::cpu::dispatch_float(e.value.dtype(), [&]<typename T>() {
      T* p = e.value.data<T>();
      const T* g = e.grad.data<T>();
      if (spec_.type == "adamw")
        adamw_update<T>(p, g, st["exp_avg"].data<T>(), st["exp_avg_sq"].data<T>(), e.value.numel(), spec_, lr, step_);
      else
        sgd_update<T>(p, g, spec_.momentum != 0 ? st["momentum_buffer"].data<T>() : nullptr, e.value.numel(), spec_, lr,
                      step_ == 1);
    });
  }
}

namespace {
// Sum of squares of g[b, e) in double over 8 lanes (element i into lane i mod 8, lanes added in order).
template <typename T>
double sum_squares(const T* __restrict g, int64_t b, int64_t e) {
  const int64_t body = b + (e - b) / 8 * 8;
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = b; i < body; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(g[i + k]) * static_cast<double>(g[i + k]);
  for (int64_t i = body; i < e; ++i) lane[i - body] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  double s = 0;
  for (double v : lane) s += v;
  return s;
}

template <typename T>
void scale_range(T* __restrict g, int64_t b, int64_t e, T k) {
  for (int64_t i = b; i < e; ++i) g[i] = g[i] * k;
}

// A tensor's sum of squares in up to kPieces pieces fixed by its size alone (never by the thread count),
// summed on the threads and added in piece order: the same bits for any thread count.
constexpr int64_t kPieces = 64, kPieceMin = 1 << 15;
template <typename T>
double tensor_sum_squares(const T* g, int64_t n) {
  const int64_t pieces = std::clamp<int64_t>(n / kPieceMin, 1, kPieces);
  const int64_t per = (n + pieces - 1) / pieces;
  double part[kPieces];
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t q = p0; q < p1; ++q)
      part[q] = cpu_vec([&] { return sum_squares(g, std::min(n, q * per), std::min(n, (q + 1) * per)); });
  });
  double s = 0;
  for (int64_t q = 0; q < pieces; ++q) s += part[q];
  return s;
}
}  // namespace

double sum_squares(const Tensor& g) {
  double s = 0;
  ops::cpu::dispatch_float(g.dtype(), [&]<typename T>() { s = tensor_sum_squares(g.data<T>(), g.numel()); });
  return s;
}

void scale_in_place(Tensor& g, double coef) {
  ops::cpu::dispatch_float(g.dtype(), [&]<typename T>() {
    T* p = g.data<T>();
    const T k = T(coef);
    parallel_for(g.numel(), kGrain, [p, k](int64_t b, int64_t e) { cpu_vec([&] { scale_range(p, b, e, k); }); });
  });
}

double grad_norm(const ParamStore& store) {
  // The L2 norm over all gradients, squares summed in double, parameter by parameter (deterministic).
  double total = 0;
  for (const auto& e : store.entries()) {
    if (e.spec.buffer || !e.has_grad) continue;
    total += sum_squares(e.grad);
  }
  return std::sqrt(total);
}

double clip_grad_norm(ParamStore& store, double max_norm) {
  double norm = grad_norm(store);
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0)
    for (auto& e : store.entries()) {
      if (e.spec.buffer || !e.has_grad) continue;
      scale_in_place(e.grad, coef);
    }
  return norm;
}

double lr_at(const io::LrScheduleSpec& s, double lr, int64_t step, int64_t total) {
  if (s.type == "step") return lr * std::pow(s.gamma, static_cast<double>(step / std::max<int64_t>(1, s.step_size)));
  if (s.type == "cosine") {
    if (step < s.warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
    double p = static_cast<double>(step - s.warmup_steps) / static_cast<double>(std::max<int64_t>(1, total - s.warmup_steps));
    p = std::min(1.0, p);
    return s.min_lr + (lr - s.min_lr) * 0.5 * (1 + std::cos(3.141592653589793 * p));
  }
  return lr;
}

}  // namespace braid::exec
