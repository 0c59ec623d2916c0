// Devices, their worker threads and the interpretation of the schedule's instructions; see pipeline.h.
#include "exec/pipeline.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {
namespace {

// Message tags: one per (cut, value, direction); messages of one tag arrive in micro-batch order.
int tag_of(int cut, size_t value, bool grad) { return (cut * 2 + (grad ? 1 : 0)) * 4096 + static_cast<int>(value); }

void accumulate(Tensor& dst, const Tensor& src, double scale, bool first) {
  ops::cpu::dispatch_float(dst.dtype(), [&]<typename T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T k = T(scale);
    const int64_t n = dst.numel();
    if (first)
      for (int64_t i = 0; i < n; ++i) d[i] = s[i] * k;
    else
      for (int64_t i = 0; i < n; ++i) d[i] += s[i] * k;
  });
}

Schedule make_schedule(const planner::Summary& s) {
  if (s.schedule == "gpipe") return gpipe(s.pipeline_stages, static_cast<int>(s.micro_batches));
  if (s.schedule == "interleaved")
    return interleaved_1f1b(s.pipeline_stages, s.virtual_stages, static_cast<int>(s.micro_batches));
  return one_f_one_b(s.pipeline_stages, static_cast<int>(s.micro_batches));
}

const ParamShard& shard_of(const StageProgram& p, const std::string& name) {
  for (const auto& s : p.params)
    if (s.name == name) return s;
  BRAID_ASSERT(false, "stage ", p.stage, " holds no parameter ", name);
  return p.params.front();
}

}  // namespace

PlanRunner::PlanRunner(const io::ModelSpec& m, const io::OptimizerSpec& opt, const planner::Plan& plan,
                       uint64_t seed, PlanRunnerOptions)
    : plan_(plan),
      seed_(seed),
      programs_(lower_plan(m, plan)),
      schedule_(make_schedule(plan.summary)),
      dp_(plan.summary.data_parallel),
      micro_batches_(static_cast<int>(plan.summary.micro_batches)),
      micro_(plan.summary.micro_batch),
      world_(plan.summary.devices, InProcOptions{std::chrono::milliseconds(300'000), micro_batches_ + 1}) {
  check_ = check_schedule(schedule_);
  BRAID_ASSERT(check_.ok, "the ", schedule_.name, " schedule does not check: ", check_.message);
  BRAID_ASSERT(schedule_.stages == static_cast<int>(programs_.size()), "schedule has ", schedule_.stages,
               " stages, the plan ", programs_.size());
  // Slots: the most micro-batches of each stage held at once on its device's list. A micro-batch takes a
  // slot at its first instruction (the activation's receive, or the forward) and gives it back after its
  // last (the gradient's send, or the backward on the first stage), as run_step does.
  stage_slots_.assign(programs_.size(), 1);
  for (const auto& list : schedule_.per_device) {
    std::vector<std::vector<bool>> held(programs_.size(), std::vector<bool>(static_cast<size_t>(micro_batches_)));
    std::vector<int> live(programs_.size(), 0);
    for (const Instr& in : list) {
      if (in.micro_batch < 0) continue;
      auto s = static_cast<size_t>(in.stage);
      auto mb = static_cast<size_t>(in.micro_batch);
      if (!held[s][mb]) {
        held[s][mb] = true;
        stage_slots_[s] = std::max(stage_slots_[s], ++live[s]);
      }
      if ((in.kind == InstrKind::SendGrad) || (in.kind == InstrKind::Backward && in.stage == 0)) --live[s];
    }
  }
  const int n = plan.summary.devices;
  for (int id = 0; id < n; ++id) {
    devices_.push_back(std::make_unique<Device>());
    devices_.back()->id = id;
  }
  for (const StageProgram& p : programs_) {
    for (size_t k = 0; k < p.devices.size(); ++k) {
      Device& d = *devices_.at(static_cast<size_t>(p.devices[k]));
      d.position = p.stage % plan.summary.pipeline_stages;
      Chunk c;
      c.prog = &p;
      c.replica = static_cast<int>(k) / p.tp;
      c.tensor_rank = static_cast<int>(k) % p.tp;
      // Parameters: drawn whole from the run's seed, as on one device, then this device's slice kept.
      for (const auto& pi : p.g.params()) {
        const ParamShard& sh = shard_of(p, pi.name);
        ParamEntry& e = d.store.add(pi.name, pi.spec, pi.grad.valid());
        Tensor whole = Tensor::empty(sh.global);
        init_tensor(whole, pi.spec.init, seed, pi.name);
        if (sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1)
          copy_chunk(whole, e.value, sh.layout.axis, c.tensor_rank, sh.parts);
        else
          e.value.copy_from(whole);
      }
      ExecutorOptions eo;
      eo.slots = stage_slots_[static_cast<size_t>(p.stage)];
      eo.stash = p.stash;
      c.exec = std::make_unique<Executor>(p.g, d.store, p.keep, eo);
      for (const auto& pi : p.g.params())
        if (pi.grad.valid()) c.grads.emplace_back(pi.grad, d.store.index_of(pi.name));
      // The dataset fills every model input in model order: the ones the stage does not read go to scratch.
      for (int s = 0; s < eo.slots; ++s)
        for (const auto& mi : m.inputs) {
          if (std::find(p.model_inputs.begin(), p.model_inputs.end(), mi.name) != p.model_inputs.end()) {
            c.model_inputs.push_back(c.exec->input(mi.name, s));
          } else {
            std::vector<int64_t> dims{micro_};
            dims.insert(dims.end(), mi.shape.begin(), mi.shape.end());
            c.model_inputs.push_back(Tensor::empty(TensorDesc{Shape(dims), mi.dtype}));
          }
        }
      c.num_model_inputs = m.inputs.size();
      d.chunks.push_back(std::move(c));
    }
  }
  for (auto& d : devices_) {
    BRAID_ASSERT(!d->chunks.empty(), "device ", d->id, " holds no stage");
    d->opt = std::make_unique<Optimizer>(opt, d->store);
    d->world = world_.communicator(d->id);
  }
  const int per_device = std::max(1, braid::num_threads() / n);
  for (auto& d : devices_)
    threads_.emplace_back([this, dev = d.get(), per_device]() {
      omp_set_num_threads(per_device);
      worker(*dev);
    });
}

PlanRunner::~PlanRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

int PlanRunner::device_at(int stage, int replica, int tensor_rank) const {
  const StageProgram& p = programs_.at(static_cast<size_t>(stage));
  return p.devices.at(static_cast<size_t>(replica * p.tp + tensor_rank));
}

PlanRunner::Chunk* PlanRunner::chunk_of(Device& d, int stage) {
  for (auto& c : d.chunks)
    if (c.prog->stage == stage) return &c;
  BRAID_ASSERT(false, "device ", d.id, " holds no chunk of stage ", stage);
  return nullptr;
}

std::vector<size_t> PlanRunner::arena_bytes() const {
  std::vector<size_t> out;
  for (const auto& d : devices_) {
    size_t total = 0;
    for (const auto& c : d->chunks)
      total += c.exec->plan().arena_bytes + c.exec->plan().slot_bytes * static_cast<size_t>(c.exec->slots());
    out.push_back(total);
  }
  return out;
}

DpStepResult PlanRunner::step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr,
                              double clip) {
  BRAID_ASSERT(static_cast<int64_t>(batch_idx.size()) == micro_ * dp_ * micro_batches_, "a step of ", batch_idx.size(),
               " samples for a plan of ", micro_batches_, " x ", dp_, " x ", micro_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = Job{&data, batch_idx, step, lr, clip};
  pending_ = devices();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&]() { return pending_ == 0; });
  if (first_error_) std::rethrow_exception(first_error_);
  for (auto& d : devices_)
    if (d->error) std::rethrow_exception(d->error);
  return devices_[0]->result;
}

void PlanRunner::worker(Device& d) {
  // Groups first: split() is a collective of the listed devices, so each device makes its own, in stage
  // order (every member of a group meets it at the same point of its sequence).
  try {
    for (auto& c : d.chunks) {
      const StageProgram& p = *c.prog;
      if (p.tp > 1) {
        std::vector<int> ranks;
        for (int t = 0; t < p.tp; ++t) ranks.push_back(device_at(p.stage, c.replica, t));
        c.tensor_comm = d.world->split(ranks);
      }
      if (p.dp > 1) {
        std::vector<int> ranks;
        for (int r = 0; r < p.dp; ++r) ranks.push_back(device_at(p.stage, r, c.tensor_rank));
        c.data_comm = d.world->split(ranks);
      }
      c.exec->set_groups(c.tensor_comm.get(), c.data_comm.get());
    }
  } catch (...) {
    d.error = std::current_exception();
  }
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
    if (!d.error) try {
        run_step(d, job);
      } catch (...) {
        d.error = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (!first_error_) first_error_ = d.error;  // the cause; the others fail with the abort it causes
        }
        d.world->abort("device " + std::to_string(d.id) + " failed");
      }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void PlanRunner::run_step(Device& d, const Job& job) {
  const int M = micro_batches_;
  const int64_t micro_global = micro_ * dp_;
  std::vector<int> backwards(d.chunks.size(), 0);
  for (auto& c : d.chunks) {
    c.free_slots.clear();
    for (int s = c.exec->slots(); s-- > 0;) c.free_slots.push_back(s);
    c.slot_of.assign(static_cast<size_t>(M), -1);
  }
  auto slot_for = [](Chunk& c, int mb) {
    int& s = c.slot_of[static_cast<size_t>(mb)];
    if (s < 0) {
      BRAID_ASSERT(!c.free_slots.empty(), "stage ", c.prog->stage, " has no free slot for micro-batch ", mb);
      s = c.free_slots.back();
      c.free_slots.pop_back();
    }
    return s;
  };
  auto release = [](Chunk& c, int mb) {
    c.free_slots.push_back(c.slot_of[static_cast<size_t>(mb)]);
    c.slot_of[static_cast<size_t>(mb)] = -1;
  };
  double loss_sum = 0;
  for (const Instr& in : schedule_.per_device[static_cast<size_t>(d.position)]) {
    Chunk& c = *chunk_of(d, in.stage);
    const StageProgram& p = *c.prog;
    const int mb = in.micro_batch;
    const uint64_t stream = static_cast<uint64_t>(job.step * M + mb);
    const int64_t offset = c.replica * micro_;
    switch (in.kind) {
      case InstrKind::Forward: {
        int slot = slot_for(c, mb);
        if (!p.model_inputs.empty()) {
          auto begin = job.batch_idx.begin() + mb * micro_global + offset;
          d.scratch.assign(begin, begin + micro_);
          std::span<Tensor> views(c.model_inputs.data() + static_cast<size_t>(slot) * c.num_model_inputs,
                                  c.num_model_inputs);
          std::lock_guard<std::mutex> lock(data_mutex_);
          job.data->read(d.scratch, views);
        }
        c.exec->set_trace_micro_batch(mb);
        auto t0 = std::chrono::steady_clock::now();
        c.exec->run_forward(slot, seed_, stream, offset);
        d.busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (p.loss.valid() && c.tensor_rank == 0)
          loss_sum += scalar(c.exec->value(p.loss, slot)) / static_cast<double>(M * dp_);
        break;
      }
      case InstrKind::Backward: {
        int slot = slot_for(c, mb);
        c.exec->set_trace_micro_batch(mb);
        auto t0 = std::chrono::steady_clock::now();
        c.exec->run_backward(slot, seed_, stream, offset);
        d.busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const size_t ci = static_cast<size_t>(&c - d.chunks.data());
        for (const auto& [grad, entry] : c.grads)
          accumulate(d.store.entries()[entry].grad, c.exec->value(grad, slot), 1.0 / M, backwards[ci] == 0);
        ++backwards[ci];
        if (p.stage == 0) release(c, mb);  // nothing to send back: the micro-batch is done
        break;
      }
      case InstrKind::SendActivation: {
        int slot = slot_for(c, mb);
        if (c.tensor_rank != 0) break;
        const int next_tp = programs_[static_cast<size_t>(p.stage + 1)].tp;
        for (size_t k = 0; k < p.send_values.size(); ++k)
          for (int t = 0; t < next_tp; ++t) {
            const Tensor& v = c.exec->value(p.send_values[k], slot);
            int peer = device_at(p.stage + 1, c.replica, t);
            io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Send, {}, {}, p.send[k].name, mb, peer,
                                                         static_cast<double>(v.bytes())});
            d.world->send(v, peer, tag_of(p.stage, k, false));
          }
        break;
      }
      case InstrKind::RecvActivation: {
        int slot = slot_for(c, mb);
        int peer = device_at(p.stage - 1, c.replica, 0);
        for (size_t k = 0; k < p.recv_values.size(); ++k) {
          Tensor v = c.exec->value(p.recv_values[k], slot);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Recv, {}, {}, p.recv[k].name, mb, peer,
                                                       static_cast<double>(v.bytes())});
          d.world->recv(v, peer, tag_of(p.stage - 1, k, false));
        }
        break;
      }
      case InstrKind::SendGrad: {
        int slot = slot_for(c, mb);
        if (c.tensor_rank == 0) {
          const int prev_tp = programs_[static_cast<size_t>(p.stage - 1)].tp;
          for (size_t k = 0; k < p.recv_grads.size(); ++k) {
            if (!p.recv_grads[k].valid()) continue;
            const Tensor& v = c.exec->value(p.recv_grads[k], slot);
            for (int t = 0; t < prev_tp; ++t) {
              int peer = device_at(p.stage - 1, c.replica, t);
              io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Send, {}, {}, "d/" + p.recv[k].name, mb,
                                                           peer, static_cast<double>(v.bytes())});
              d.world->send(v, peer, tag_of(p.stage - 1, k, true));
            }
          }
        }
        release(c, mb);
        break;
      }
      case InstrKind::RecvGrad: {
        int slot = slot_for(c, mb);
        int peer = device_at(p.stage + 1, c.replica, 0);
        for (size_t k = 0; k < p.send_grads.size(); ++k) {
          if (!p.send_grads[k].valid()) continue;
          Tensor v = c.exec->value(p.send_grads[k], slot);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Recv, {}, {}, "d/" + p.send[k].name, mb, peer,
                                                       static_cast<double>(v.bytes())});
          d.world->recv(v, peer, tag_of(p.stage, k, true));
        }
        break;
      }
      case InstrKind::AllReduceGrads: {
        if (!c.data_comm) break;
        double bytes = 0;
        for (const auto& [grad, entry] : c.grads) bytes += static_cast<double>(d.store.entries()[entry].grad.bytes());
        io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce grads", -1, -1, bytes});
        for (const auto& [grad, entry] : c.grads) c.data_comm->all_reduce(d.store.entries()[entry].grad, ReduceOp::Avg);
        break;
      }
      case InstrKind::OptimizerStep:
        break;  // one update of the device's whole store after the list (clipping needs every gradient)
    }
  }
  // The loss (held by the loss stage's tensor rank 0 of each replica) and the global gradient norm: sums
  // over the world in rank order. A gradient counts once: replica 0's, tensor rank 0's unless it is a slice.
  io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
  Tensor sums = Tensor::empty(TensorDesc{Shape{2}, DType::f64});
  double sq = 0;
  if (job.clip > 0)
    for (const auto& c : d.chunks) {
      if (c.replica != 0) continue;
      for (const auto& sh : c.prog->params) {
        if (sh.buffer) continue;
        if (c.tensor_rank != 0 && sh.layout.kind != ops::Sbp::Kind::Split) continue;
        const ParamEntry* e = d.store.find(sh.name);
        if (!e->has_grad) continue;
        ops::cpu::dispatch_float(e->grad.dtype(), [&]<typename T>() {
          const T* g = e->grad.data<T>();
          for (int64_t i = 0; i < e->grad.numel(); ++i) sq += static_cast<double>(g[i]) * static_cast<double>(g[i]);
        });
      }
    }
  sums.data<double>()[0] = loss_sum;
  sums.data<double>()[1] = sq;
  d.world->all_reduce(sums, ReduceOp::Sum);
  d.result.loss = sums.data<double>()[0];
  d.result.grad_norm = -1;
  if (job.clip > 0) {
    const double norm = std::sqrt(sums.data<double>()[1]);
    const double coef = std::min(1.0, job.clip / (norm + 1e-6));
    if (coef < 1.0)
      for (auto& e : d.store.entries()) {
        if (e.spec.buffer || !e.has_grad) continue;
        ops::cpu::dispatch_float(e.grad.dtype(), [&]<typename T>() {
          T* g = e.grad.data<T>();
          for (int64_t i = 0; i < e.grad.numel(); ++i) g[i] = g[i] * T(coef);
        });
      }
    d.result.grad_norm = norm;
  }
  d.opt->step(job.lr);
}

void PlanRunner::gather(ParamStore& full, Optimizer* full_opt) const {
  for (const auto& d : devices_)
    for (const auto& c : d->chunks) {
      if (c.replica != 0) continue;
      for (const auto& sh : c.prog->params) {
        const bool slice = sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1;
        if (!slice && c.tensor_rank != 0) continue;
        auto put = [&](const Tensor& local, Tensor& whole) {
          if (slice)
            copy_chunk(local, whole, sh.layout.axis, c.tensor_rank, sh.parts, true);
          else
            whole.copy_from(local);
        };
        ParamEntry* dst = full.find(sh.name);
        BRAID_ASSERT(dst, "the whole model has no parameter ", sh.name);
        put(d->store.find(sh.name)->value, dst->value);
        if (!full_opt || sh.buffer) continue;
        auto& mine = const_cast<Optimizer&>(*d->opt).state();
        auto it = mine.find(sh.name);
        if (it == mine.end()) continue;
        for (auto& [key, t] : it->second) put(t, full_opt->state().at(sh.name).at(key));
      }
    }
  if (full_opt) full_opt->set_steps_taken(devices_[0]->opt->steps_taken());
}

void PlanRunner::scatter(const ParamStore& full, Optimizer* full_opt) {
  for (auto& d : devices_) {
    for (auto& c : d->chunks)
      for (const auto& sh : c.prog->params) {
        const bool slice = sh.layout.kind == ops::Sbp::Kind::Split && sh.parts > 1;
        auto take = [&](const Tensor& whole, Tensor& local) {
          if (slice)
            copy_chunk(whole, local, sh.layout.axis, c.tensor_rank, sh.parts);
          else
            local.copy_from(whole);
        };
        const ParamEntry* src = full.find(sh.name);
        BRAID_ASSERT(src, "the whole model has no parameter ", sh.name);
        take(src->value, d->store.find(sh.name)->value);
        if (!full_opt || sh.buffer) continue;
        auto it = d->opt->state().find(sh.name);
        if (it == d->opt->state().end()) continue;
        for (auto& [key, t] : it->second) take(full_opt->state().at(sh.name).at(key), t);
      }
    if (full_opt) d->opt->set_steps_taken(full_opt->steps_taken());
  }
}

std::vector<double> PlanRunner::busy_seconds() const {
  std::vector<double> out;
  for (const auto& d : devices_) out.push_back(d->busy_s);
  return out;
}

void PlanRunner::set_trace(int device, io::TraceLane* lane) {
  Device& d = *devices_.at(static_cast<size_t>(device));
  d.trace = lane;
  for (auto& c : d.chunks) c.exec->set_trace(lane);
}

}  // namespace braid::exec
