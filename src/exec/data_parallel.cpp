// Data-parallel replicas, their worker threads and the gradient all-reduce; see data_parallel.h.
// A step: the main thread publishes a Job and bumps the generation; each worker runs forward/backward on its
// shard, all-reduces gradient buckets (every rank issues the same buckets in the same order), clips and steps
// its optimizer, then reports. A failing worker aborts the communicator so its peers fail instead of waiting.
#include "exec/data_parallel.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/parallel.h"

namespace braid::exec {

DataParallel::DataParallel(const io::ModelSpec& m, const io::OptimizerSpec& opt, int64_t micro, uint64_t seed,
                           DataParallelOptions options)
    : micro_(micro), seed_(seed), options_(options), world_(options.devices) {
  const int n = options.devices;
  BRAID_ASSERT(n >= 1 && micro % n == 0, "data parallel: micro-batch ", micro, " on ", n, " replicas");
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_unique<Replica>();
    rep->rank = r;
    rep->runner = make_runner(m, micro / n, true, rep->store, seed);
    rep->opt = std::make_unique<Optimizer>(opt, rep->store);
    rep->comm = world_.communicator(r);
    // Buckets: trainable gradients in reverse parameter order (the order backward produces them), packed
    // up to bucket_bytes, one dtype per bucket.
    auto& entries = rep->store.entries();
    Bucket cur;
    size_t cur_bytes = 0;
    auto flush = [&]() {
      if (cur.entries.empty()) return;
      if (cur.entries.size() > 1) {
        int64_t numel = 0;
        for (size_t i : cur.entries) numel += entries[i].grad.numel();
        cur.flat = Tensor::empty(TensorDesc{Shape{numel}, entries[cur.entries[0]].grad.dtype()});
      }
      rep->buckets.push_back(std::move(cur));
      cur = Bucket{};
      cur_bytes = 0;
    };
    for (size_t k = entries.size(); k-- > 0;) {
      const ParamEntry& e = entries[k];
      if (e.spec.buffer || !e.has_grad) continue;
      if (!cur.entries.empty() && entries[cur.entries[0]].grad.dtype() != e.grad.dtype()) flush();
      cur.entries.push_back(k);
      cur_bytes += e.grad.bytes();
      if (cur_bytes >= options_.bucket_bytes) flush();
    }
    flush();
    replicas_.push_back(std::move(rep));
  }
  // Intra-op threads: the process's share per replica, so that N replicas do not oversubscribe the cores.
  const int per_replica = std::max(1, braid::num_threads() / n);
  for (auto& rep : replicas_)
    threads_.emplace_back([this, r = rep.get(), per_replica]() {
      omp_set_num_threads(per_replica);
      worker(*r);
    });
}

DataParallel::~DataParallel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<size_t> DataParallel::bucket_bytes() const {
  std::vector<size_t> out;
  const Replica& r = *replicas_[0];
  for (const auto& b : r.buckets) {
    size_t bytes = 0;
    for (size_t i : b.entries) bytes += r.store.entries()[i].grad.bytes();
    out.push_back(bytes);
  }
  return out;
}

void DataParallel::broadcast_from_replica0() {
  Replica& src = *replicas_[0];
  auto copy = [](Tensor& dst, const Tensor& s) {
    BRAID_ASSERT(dst.desc() == s.desc(), "replica tensor ", dst.desc().str(), " vs ", s.desc().str());
    std::memcpy(dst.raw(), s.raw(), s.bytes());
  };
  for (size_t r = 1; r < replicas_.size(); ++r) {
    Replica& dst = *replicas_[r];
    for (size_t i = 0; i < src.store.entries().size(); ++i)
      copy(dst.store.entries()[i].value, src.store.entries()[i].value);
    for (auto& [name, st] : src.opt->state())
      for (auto& [key, t] : st) copy(dst.opt->state().at(name).at(key), t);
    dst.opt->set_steps_taken(src.opt->steps_taken());
  }
}

DpStepResult DataParallel::step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr,
                                double clip) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = Job{&data, batch_idx, step, lr, clip};
  pending_ = size();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&]() { return pending_ == 0; });
  // The first failure in rank order (peers of a failed replica fail with the abort it caused).
  for (auto& r : replicas_)
    if (r->error) std::rethrow_exception(r->error);
  DpStepResult res;
  for (auto& r : replicas_) res.loss += r->result.loss;  // rank order: deterministic
  res.loss /= static_cast<double>(size());
  res.grad_norm = replicas_[0]->result.grad_norm;
#ifndef NDEBUG
  // Every 16th step (and the first): a full check costs a pass over all parameters and optimizer state.
  if (step % 16 == 0) check_replicas_identical();
#endif
  return res;
}

void DataParallel::worker(Replica& r) {
  uint64_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&]() { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      job = job_;
    }
    try {
      run_step(r, job);
    } catch (...) {
      r.error = std::current_exception();
      r.comm->abort("data-parallel replica " + std::to_string(r.rank) + " failed");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void DataParallel::run_step(Replica& r, const Job& job) {
  Shard shard{r.rank, size()};
  r.result.loss = forward_backward(*r.runner, r.store, *job.data, job.batch_idx, micro_, seed_, job.step, r.scratch, shard);
  {
    double bytes = 0;
    if (r.trace)
      for (const auto& e : r.store.entries()) bytes += e.spec.buffer ? 0.0 : static_cast<double>(e.grad.bytes());
    io::TraceScope scope(r.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce grads", -1, -1, bytes});
    all_reduce_grads(r);
  }
  // Identical gradients on every replica: clipping and the update keep the replicas identical.
  io::TraceScope scope(r.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
  r.result.grad_norm = job.clip > 0 ? clip_grad_norm(r.store, job.clip) : -1;
  r.opt->step(job.lr);
}

void DataParallel::all_reduce_grads(Replica& r) {
  auto& entries = r.store.entries();
  for (auto& b : r.buckets) {
    if (b.entries.size() == 1) {
      r.comm->all_reduce(entries[b.entries[0]].grad, ReduceOp::Avg);
      continue;
    }
    auto* flat = static_cast<char*>(b.flat.raw());
    size_t off = 0;
    for (size_t i : b.entries) {
      const Tensor& g = entries[i].grad;
      std::memcpy(flat + off, g.raw(), g.bytes());
      off += g.bytes();
    }
    r.comm->all_reduce(b.flat, ReduceOp::Avg);
    off = 0;
    for (size_t i : b.entries) {
      Tensor& g = entries[i].grad;
      std::memcpy(g.raw(), flat + off, g.bytes());
      off += g.bytes();
    }
  }
}

void DataParallel::set_trace(int r, io::TraceLane* lane) {
  Replica& rep = *replicas_.at(static_cast<size_t>(r));
  rep.trace = lane;
  rep.runner->exec->set_trace(lane);
}

uint64_t DataParallel::checksum(int rank) const {
  const Replica& r = *replicas_.at(static_cast<size_t>(rank));
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const Tensor& t) {  // FNV-1a over 8-byte words (then the tail bytes): 8x fewer steps
    const auto* p = static_cast<const unsigned char*>(t.raw());
    const size_t n = t.bytes(), words = n / 8;
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (size_t i = 8 * words; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& e : r.store.entries())
    if (!e.spec.buffer) mix(e.value);
  for (const auto& [name, st] : r.opt->state())
    for (const auto& [key, t] : st) mix(t);
  return h;
}

void DataParallel::check_replicas_identical() const {
  const uint64_t c0 = checksum(0);
  for (int r = 1; r < static_cast<int>(replicas_.size()); ++r)
    BRAID_ASSERT(checksum(r) == c0, "data-parallel replica ", r, " diverged from replica 0 (parameters or optimizer state)");
}

}  // namespace braid::exec
