// Devices, their worker threads and the interpretation of the schedule's instructions; see pipeline.h.
#include "exec/pipeline.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/kernel_util.h"

namespace braid::exec {
namespace {

// Buckets of gradients in the order backward produces them (their producer nodes), each up to `limit` bytes
// (a larger gradient is a bucket of its own).
template <typename ChunkT>
void make_buckets(ChunkT& c, ParamStore& store, size_t limit) {
  const graph::Graph& g = c.prog->g;
  std::vector<size_t> order(c.grads.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return g.value(c.grads[a].first).producer.v < g.value(c.grads[b].first).producer.v;
  });
  c.grads_at_node.assign(g.nodes().size(), {});
  c.bucket_of.assign(c.grads.size(), 0);
  size_t bytes = 0;
  for (size_t gi : order) {
    const Tensor& grad = store.entries()[c.grads[gi].second].grad;
    c.grads_at_node[g.value(c.grads[gi].first).producer.idx()].push_back(gi);
    if (c.buckets.empty() || (bytes + grad.bytes() > limit && bytes > 0) ||
        grad.dtype() != store.entries()[c.grads[c.buckets.back().grads.front()].second].grad.dtype()) {
      c.buckets.emplace_back();
      bytes = 0;
    }
    c.buckets.back().grads.push_back(gi);
    c.bucket_of[gi] = c.buckets.size() - 1;
    bytes += grad.bytes();
  }
  // A bucket of several gradients is one flat tensor and the gradients live in it (views, each on a 64-byte
  // boundary; the gaps stay zero), so the all-reduce works on them in place: no packing before it and no
  // unpacking after (PyTorch DDP's gradient_as_bucket_view). Packing and unpacking had cost two copies of
  // every gradient per step (a quarter of the CPU time of mlp dp 4 on cpu:4 by `perf`).
  for (auto& b : c.buckets) {
    if (b.grads.size() < 2) continue;
    const DType dt = store.entries()[c.grads[b.grads[0]].second].grad.dtype();
    const size_t es = dtype_size(dt);
    auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
    size_t total = 0;
    for (size_t gi : b.grads) total += aligned(store.entries()[c.grads[gi].second].grad.bytes());
    b.flat = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(total / es)}, dt});
    size_t off = 0;
    for (size_t gi : b.grads) {
      Tensor& grad = store.entries()[c.grads[gi].second].grad;
      Tensor view = b.flat.part(off, grad.desc());
      view.copy_from(grad);
      grad = view;
      off += aligned(grad.bytes());
    }
  }
}

// Forward and backward FLOPs of one micro-batch through a stage program (ops::op_cost): the work of the device
// running it, for placing devices on shared cores.
double program_flops(const graph::Graph& g) {
  double flops = 0;
  std::vector<TensorDesc> in, out;
  for (const auto& n : g.nodes()) {
    in.clear();
    out.clear();
    for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
    for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
    flops += ops::op_cost(*n.op, n.attrs, in, out).flops;
  }
  return flops;
}

}  // namespace

void add_stage_params(const StageProgram& p, int tensor_rank, uint64_t seed, ParamStore& store) {
  for (const auto& pi : p.g.params())
    init_shard(store.add(pi.name, pi.spec, pi.grad.valid()).value, shard_of(p, pi.name), pi.spec.init, seed, tensor_rank);
}

std::vector<Tensor> stage_model_inputs(const StageProgram& p, const io::ModelSpec& m, int slots, int64_t micro,
                                       const std::function<Tensor(const std::string&, int)>& input) {
  std::vector<Tensor> views;
  for (int s = 0; s < slots; ++s)
    for (const auto& mi : m.inputs) {
      if (std::find(p.model_inputs.begin(), p.model_inputs.end(), mi.name) != p.model_inputs.end()) {
        views.push_back(input(mi.name, s));
      } else {
        std::vector<int64_t> dims{micro};
        dims.insert(dims.end(), mi.shape.begin(), mi.shape.end());
        views.push_back(Tensor::empty(TensorDesc{Shape(dims), mi.dtype}));
      }
    }
  return views;
}

PlanRunner::PlanRunner(const io::ModelSpec& m, const io::OptimizerSpec& opt, const planner::Plan& plan,
                       uint64_t seed, PlanRunnerOptions options, const PlanWorld* world)
    : plan_(plan),
      seed_(seed),
      programs_(lower_plan(m, plan, LowerOptions{options.sync_batch_norm})),
      schedule_(schedule_of(plan.summary)),
      dp_(plan.summary.data_parallel),
      micro_batches_(static_cast<int>(plan.summary.micro_batches)),
      micro_(plan.summary.micro_batch),
      options_(options) {
  check_ = check_schedule(schedule_);
  BRAID_ASSERT(check_.ok, "the ", schedule_.name, " schedule does not check: ", check_.message);
  BRAID_ASSERT(schedule_.stages == static_cast<int>(programs_.size()), "schedule has ", schedule_.stages,
               " stages, the plan ", programs_.size());
  stage_slots_ = exec::stage_slots(schedule_);  // each stage's executor slots (schedule.h)
  const int n = plan.summary.devices;
  std::vector<int> local;
  if (world) {
    local = world->local;
  } else {
    inproc_ = std::make_unique<InProcWorld>(n, InProcOptions{std::chrono::milliseconds(300'000), micro_batches_ + 1});
    for (int id = 0; id < n; ++id) local.push_back(id);
  }
  local_index_.assign(static_cast<size_t>(n), -1);
  for (int id : local) {
    BRAID_ASSERT(id >= 0 && id < n && local_index_[static_cast<size_t>(id)] < 0, "local device ", id, " of ", n);
    local_index_[static_cast<size_t>(id)] = static_cast<int>(devices_.size());
    devices_.push_back(std::make_unique<Device>());
    devices_.back()->id = id;
  }
  for (const StageProgram& p : programs_) {
    for (size_t k = 0; k < p.devices.size(); ++k) {
      if (!local_of(p.devices[k])) continue;
      Device& d = *local_of(p.devices[k]);
      d.position = p.stage % plan.summary.pipeline_stages;
      Chunk c;
      c.prog = &p;
      c.replica = static_cast<int>(k) / p.tp;
      c.tensor_rank = static_cast<int>(k) % p.tp;
      add_stage_params(p, c.tensor_rank, seed, d.store);
      for (const auto& pi : p.g.params())
        if (pi.grad.valid()) c.grads.emplace_back(pi.grad, d.store.index_of(pi.name));
      if (p.dp > 1) make_buckets(c, d.store, options.bucket_bytes);
      ExecutorOptions eo;
      eo.slots = stage_slots_[static_cast<size_t>(p.stage)];
      eo.stash = p.stash;
      // One micro-batch a step in one slot: backward writes the gradients straight into the store (into
      // their buckets), instead of into the arena and then a copy (accumulate) into the store.
      c.grads_in_store = micro_batches_ == 1 && eo.slots == 1;
      if (c.grads_in_store)
        for (const auto& [grad, entry] : c.grads) eo.external.emplace_back(grad, d.store.entries()[entry].grad);
      c.exec = std::make_unique<Executor>(p.g, d.store, p.keep, eo);
      c.model_inputs = stage_model_inputs(p, m, eo.slots, micro_,
                                          [&](const std::string& name, int slot) { return c.exec->input(name, slot); });
      c.num_model_inputs = m.inputs.size();
      d.chunks.push_back(std::move(c));
    }
  }
  for (auto& d : devices_) {
    BRAID_ASSERT(!d->chunks.empty(), "device ", d->id, " holds no stage");
    d->sums = Tensor::empty(TensorDesc{Shape{2}, DType::f64});
    d->flag = Tensor::empty(TensorDesc{Shape{1}, DType::f64});
    // The step's last backward accumulates each gradient as soon as its node has run and hands a full bucket
    // to the comm thread (the chunks no longer move: their addresses are stable from here on).
    for (auto& c : d->chunks) {
      if (c.buckets.empty()) continue;
      c.bucket_hook = [this, dev = d.get(), ch = &c](size_t node) {
        for (size_t gi : ch->grads_at_node[node]) {
          const auto& [grad, entry] = ch->grads[gi];
          if (!ch->grads_in_store)
            accumulate(dev->store.entries()[entry].grad, ch->exec->value(grad, ch->hook_slot), 1.0 / micro_batches_,
                       ch->hook_first);
          if (--ch->buckets[ch->bucket_of[gi]].pending == 0) submit_bucket(*dev, *ch, ch->bucket_of[gi]);
        }
      };
    }
    d->opt = std::make_unique<Optimizer>(opt, d->store);
    d->world = world ? world->communicator(d->id) : inproc_->communicator(d->id);
  }
  const int per_device = std::max(1, braid::num_threads() / static_cast<int>(devices_.size()));
  const bool pin = inproc_ != nullptr;  // every device in this process: spread them over its cores
  const int slots = static_cast<int>(devices_.size());
  // Devices sharing cores are placed by their work (forward and backward FLOPs of their stages' programs), so
  // that the busy ones do not share a core while another idles: by device id, mlp pp 4 on cpu:4 of 2 cores put
  // both of its heavy stages (devices 0 and 2) on one core.
  std::vector<double> loads;
  for (auto& d : devices_) {
    double flops = 0;
    for (const auto& c : d->chunks) flops += program_flops(c.prog->g);
    loads.push_back(flops);
  }
  const std::vector<int> place = balanced_slots(loads);
  for (size_t i = 0; i < devices_.size(); ++i) {
    auto& d = devices_[i];
    threads_.emplace_back([this, dev = d.get(), per_device, pin, slots, slot = place[i]]() {
      // Each device on its own share of the cores (cpu:4 on 2 cores: two per core). Left to the scheduler,
      // the woken device threads often stacked on one core for milliseconds: the same plan measured 3.0 or
      // 5.6-15.8 ms a step from run to run (docs/planner.md, "What the measurements showed").
      if (pin) pin_thread_to_share(slot, slots);
      omp_set_num_threads(per_device);
      worker(*dev);
    });
    if (std::any_of(d->chunks.begin(), d->chunks.end(), [](const Chunk& c) { return !c.buckets.empty(); }))
      d->comm_thread = std::thread([this, dev = d.get(), pin, slots, slot = place[i]]() {
        // With its device, as calibration's collectives run: unpinned, cpu:4's four comm threads on 2 cores
        // sometimes stacked on one core (mlp dp 4: the all-reduce 1.9 ms instead of 0.7; docs/planner.md).
        if (pin) pin_thread_to_share(slot, slots);
        comm_worker(*dev);
      });
  }
}

PlanRunner::~PlanRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
  for (auto& d : devices_) {
    {
      std::lock_guard<std::mutex> lock(d->comm_mu);
      d->comm_quit = true;
    }
    d->comm_cv.notify_all();
    if (d->comm_thread.joinable()) d->comm_thread.join();
  }
}

void PlanRunner::comm_worker(Device& d) {
  for (;;) {
    CommJob job;
    {
      std::unique_lock<std::mutex> lock(d.comm_mu);
      d.comm_cv.wait(lock, [&]() { return d.comm_quit || !d.comm_queue.empty(); });
      if (d.comm_queue.empty()) return;
      job = d.comm_queue.front();
      d.comm_queue.pop_front();
    }
    Chunk& c = *job.chunk;
    auto& b = c.buckets[job.bucket];
    auto& entries = d.store.entries();
    try {
      if (!d.comm_error) {
        // The bucket's gradients are views into b.flat (make_buckets): reduced in place.
        Tensor& t = b.flat.defined() ? b.flat : entries[c.grads[b.grads[0]].second].grad;
        io::TraceScope scope(d.comm_trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce grads",
                                                          -1, -1, static_cast<double>(t.bytes())});
        c.bucket_comm->all_reduce(t, ReduceOp::Avg);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(d.comm_mu);
      d.comm_error = std::current_exception();
      c.bucket_comm->abort("the gradient all-reduce of device " + std::to_string(d.id) + " failed");
    }
    {
      std::lock_guard<std::mutex> lock(d.comm_mu);
      --c.outstanding;
    }
    d.comm_cv.notify_all();
  }
}

void PlanRunner::submit_bucket(Device& d, Chunk& c, size_t bucket) {
  {
    std::lock_guard<std::mutex> lock(d.comm_mu);
    ++c.outstanding;
    d.comm_queue.push_back(CommJob{&c, bucket});
  }
  d.comm_cv.notify_all();
}

void PlanRunner::wait_buckets(Device& d, Chunk& c) {
  std::unique_lock<std::mutex> lock(d.comm_mu);
  d.comm_cv.wait(lock, [&]() { return c.outstanding == 0; });
  if (d.comm_error) std::rethrow_exception(d.comm_error);
}

int PlanRunner::device_at(int stage, int replica, int tensor_rank) const {
  return stage_device(programs_.at(static_cast<size_t>(stage)), replica, tensor_rank);
}

PlanRunner::Device* PlanRunner::local_of(int device) const {
  if (device < 0 || device >= static_cast<int>(local_index_.size())) return nullptr;
  int i = local_index_[static_cast<size_t>(device)];
  return i < 0 ? nullptr : devices_[static_cast<size_t>(i)].get();
}

std::vector<int> PlanRunner::local_devices() const {
  std::vector<int> out;
  for (const auto& d : devices_) out.push_back(d->id);
  return out;
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
  pending_ = static_cast<int>(devices_.size());
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
      if (p.tp > 1) c.tensor_comm = d.world->split(tensor_group(p, c.replica));
      if (p.dp > 1) {
        const std::vector<int> ranks = data_group(p, c.tensor_rank);
        c.data_comm = d.world->split(ranks);
        if (!c.buckets.empty()) c.bucket_comm = d.world->split(ranks);  // the comm thread's own
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
  for (auto& c : d.chunks) {
    c.backwards = 0;
    c.slots.reset(c.prog->stage, c.exec->slots(), M);
    for (auto& b : c.buckets) b.pending = static_cast<int>(b.grads.size());
  }
  double loss_sum = 0;
  for (const Instr& in : schedule_.per_device[static_cast<size_t>(d.position)]) {
    Chunk& c = *chunk_of(d, in.stage);
    const StageProgram& p = *c.prog;
    const int mb = in.micro_batch;
    const uint64_t stream = static_cast<uint64_t>(job.step * M + mb);
    const int64_t offset = c.replica * micro_;
    switch (in.kind) {
      case InstrKind::Forward: {
        int slot = c.slots.take(mb);
        if (!p.model_inputs.empty()) {
          auto begin = job.batch_idx.begin() + mb * micro_global + offset;
          d.scratch.assign(begin, begin + micro_);
          std::span<Tensor> views(c.model_inputs.data() + static_cast<size_t>(slot) * c.num_model_inputs,
                                  c.num_model_inputs);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Data, {}, {}, "read", mb});
          job.data->read(d.scratch, views);  // thread-safe (io::Dataset::read): the devices read in parallel
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
        int slot = c.slots.take(mb);
        c.exec->set_trace_micro_batch(mb);
        const bool first = c.backwards == 0;
        auto t0 = std::chrono::steady_clock::now();
        if (!c.buckets.empty() && c.backwards == M - 1) {
          // The step's last backward of this stage: gradients go to their buckets as their nodes run, and a
          // full bucket starts its all-reduce while backward goes on (bucket_hook).
          c.hook_slot = slot;
          c.hook_first = first;
          c.exec->set_after_node(&c.bucket_hook);
          c.exec->run_backward(slot, seed_, stream, offset);
          c.exec->set_after_node(nullptr);
        } else {
          c.exec->run_backward(slot, seed_, stream, offset);
          if (!c.grads_in_store)
            for (const auto& [grad, entry] : c.grads)
              accumulate(d.store.entries()[entry].grad, c.exec->value(grad, slot), 1.0 / M, first);
        }
        d.busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++c.backwards;
        if (p.stage == 0) c.slots.release(mb);  // nothing to send back: the micro-batch is done
        break;
      }
      case InstrKind::SendActivation: {
        int slot = c.slots.take(mb);
        if (c.tensor_rank != 0) break;
        const int next_tp = programs_[static_cast<size_t>(p.stage + 1)].tp;
        for (size_t k = 0; k < p.send_values.size(); ++k)
          for (int t = 0; t < next_tp; ++t) {
            const Tensor& v = c.exec->value(p.send_values[k], slot);
            int peer = device_at(p.stage + 1, c.replica, t);
            io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Send, {}, {}, p.send[k].name, mb, peer,
                                                         static_cast<double>(v.bytes())});
            d.world->send(v, peer, boundary_tag(p.stage, k, false));
          }
        break;
      }
      case InstrKind::RecvActivation: {
        int slot = c.slots.take(mb);
        int peer = device_at(p.stage - 1, c.replica, 0);
        for (size_t k = 0; k < p.recv_values.size(); ++k) {
          Tensor v = c.exec->value(p.recv_values[k], slot);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Recv, {}, {}, p.recv[k].name, mb, peer,
                                                       static_cast<double>(v.bytes())});
          d.world->recv(v, peer, boundary_tag(p.stage - 1, k, false));
        }
        break;
      }
      case InstrKind::SendGrad: {
        int slot = c.slots.take(mb);
        if (c.tensor_rank == 0) {
          const int prev_tp = programs_[static_cast<size_t>(p.stage - 1)].tp;
          for (size_t k = 0; k < p.recv_grads.size(); ++k) {
            if (!p.recv_grads[k].valid()) continue;
            const Tensor& v = c.exec->value(p.recv_grads[k], slot);
            for (int t = 0; t < prev_tp; ++t) {
              int peer = device_at(p.stage - 1, c.replica, t);
              io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Send, {}, {}, p.recv[k].grad_name, mb,
                                                           peer, static_cast<double>(v.bytes())});
              d.world->send(v, peer, boundary_tag(p.stage - 1, k, true));
            }
          }
        }
        c.slots.release(mb);
        break;
      }
      case InstrKind::RecvGrad: {
        int slot = c.slots.take(mb);
        int peer = device_at(p.stage + 1, c.replica, 0);
        for (size_t k = 0; k < p.send_grads.size(); ++k) {
          if (!p.send_grads[k].valid()) continue;
          Tensor v = c.exec->value(p.send_grads[k], slot);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Recv, {}, {}, p.send[k].grad_name, mb, peer,
                                                       static_cast<double>(v.bytes())});
          d.world->recv(v, peer, boundary_tag(p.stage, k, true));
        }
        break;
      }
      case InstrKind::AllReduceGrads: {
        if (c.buckets.empty()) break;
        io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "wait all_reduce grads"});
        wait_buckets(d, c);  // started during the last backward; usually done by now
        break;
      }
      case InstrKind::OptimizerStep:
        break;  // one update of the device's whole store after the list (clipping needs every gradient)
    }
  }
  // The loss (held by the loss stage's tensor rank 0 of each replica) and the global gradient norm: sums
  // over the world in rank order. A gradient counts once: replica 0's, tensor rank 0's unless it is a slice.
  Tensor& sums = d.sums;
  double sq = 0;
  if (job.clip > 0) {
    io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "grad norm"});
    for (const auto& c : d.chunks) {
      if (c.replica != 0) continue;
      for (const auto& sh : c.prog->params) {
        if (sh.buffer || !shard_counts(sh, c.tensor_rank)) continue;
        const ParamEntry* e = d.store.find(sh.name);
        if (!e->has_grad) continue;
        sq += sum_squares(e->grad);
      }
    }
  }
  sums.data<double>()[0] = loss_sum;
  sums.data<double>()[1] = sq;
  {
    io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce loss, norm"});
    d.world->all_reduce(sums, ReduceOp::Sum);
  }
  io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
  d.result.loss = sums.data<double>()[0];
  d.result.grad_norm = -1;
  if (job.clip > 0) {
    const double norm = std::sqrt(sums.data<double>()[1]);
    const double coef = clip_coefficient(norm, job.clip);
    if (coef < 1.0)
      for (auto& e : d.store.entries()) {
        if (e.spec.buffer || !e.has_grad) continue;
        scale_in_place(e.grad, coef);
      }
    d.result.grad_norm = norm;
  }
  d.opt->step(job.lr);
}

void gather_shards(const std::vector<StageProgram>& programs, const std::function<ShardHolder(int)>& local,
                   Communicator* host, ParamStore& full, Optimizer* full_opt) {
  // Every shard that counts (replica 0's; tensor rank 0's unless it is a slice), in one order all processes
  // agree on: programs, then their devices, then parameters. Device 0's process assembles; a shard of another
  // process travels over `host` (the devices are idle, so the caller's thread may use it).
  const ShardHolder root = local(0);
  int shard_index = 0;  // counts the same shards in every process: message tags agree
  for (const StageProgram& p : programs)
    for (int t = 0; t < p.tp; ++t) {
      const int owner = p.devices[static_cast<size_t>(t)];  // replica 0
      const ShardHolder mine = local(owner);
      for (const auto& sh : p.params) {
        if (!shard_counts(sh, t)) continue;
        int tag = (1 << 28) + 8 * shard_index++;
        if (!mine.store && !root.store) continue;
        // The tensors of this shard: value, then optimizer state in key order.
        std::vector<Tensor> owned;
        if (mine.store) {
          owned.push_back(mine.store->find(sh.name)->value);
          if (full_opt && !sh.buffer && mine.opt)
            if (auto it = std::as_const(*mine.opt).state().find(sh.name); it != mine.opt->state().end())
              for (const auto& [key, st] : it->second) owned.push_back(st);
        }
        std::vector<Tensor*> wholes;
        if (root.store) {
          wholes.push_back(&full.find(sh.name)->value);
          if (full_opt && !sh.buffer)
            if (auto it = full_opt->state().find(sh.name); it != full_opt->state().end())
              for (auto& [key, st] : it->second) wholes.push_back(&st);
        }
        const size_t count = mine.store ? owned.size() : wholes.size();
        for (size_t k = 0; k < count; ++k, ++tag) {
          Tensor part;
          if (mine.store && root.store) {
            part = owned[k];
          } else if (mine.store) {
            host->send(owned[k], 0, tag);
            continue;
          } else {
            part = Tensor::empty(shard_desc(wholes[k]->desc(), sh.layout, sh.parts));
            host->recv(part, owner, tag);
          }
          put_shard(part, *wholes[k], sh, t);
        }
      }
    }
}

void PlanRunner::gather(ParamStore& full, Optimizer* full_opt) {
  gather_shards(
      programs_,
      [&](int id) {
        Device* d = local_of(id);
        return d ? ShardHolder{&d->store, d->opt.get()} : ShardHolder{};
      },
      devices_[0]->world.get(), full, full_opt);  // between processes each holds one device: its world
  if (full_opt && local_of(0)) full_opt->set_steps_taken(devices_[0]->opt->steps_taken());
}

void scatter_stage(const StageProgram& p, int tensor_rank, const ParamStore& full, const Optimizer* full_opt,
                   ParamStore& store, Optimizer* opt) {
  for (const auto& sh : p.params) {
    const ParamEntry* src = full.find(sh.name);
    BRAID_ASSERT(src, "the whole model has no parameter ", sh.name);
    take_shard(src->value, store.find(sh.name)->value, sh, tensor_rank);
    if (!full_opt || !opt || sh.buffer) continue;
    auto it = opt->state().find(sh.name);
    if (it == opt->state().end()) continue;
    for (auto& [key, t] : it->second) take_shard(full_opt->state().at(sh.name).at(key), t, sh, tensor_rank);
  }
}

void PlanRunner::scatter(const ParamStore& full, Optimizer* full_opt) {
  for (auto& d : devices_) {
    for (auto& c : d->chunks) scatter_stage(*c.prog, c.tensor_rank, full, full_opt, d->store, d->opt.get());
    if (full_opt) d->opt->set_steps_taken(full_opt->steps_taken());
  }
}

std::vector<std::vector<size_t>> PlanRunner::bucket_bytes(int device) const {
  std::vector<std::vector<size_t>> out;
  if (!local_of(device)) return out;
  const Device& d = *local_of(device);
  for (const auto& c : d.chunks) {
    out.emplace_back();
    for (const auto& b : c.buckets) {
      size_t bytes = 0;
      for (size_t gi : b.grads) bytes += d.store.entries()[c.grads[gi].second].grad.bytes();
      out.back().push_back(bytes);
    }
  }
  return out;
}

bool PlanRunner::any(bool flag) {
  Tensor& t = devices_[0]->flag;
  t.data<double>()[0] = flag ? 1.0 : 0.0;
  devices_[0]->world->all_reduce(t, ReduceOp::Max);  // the workers are idle between steps
  return t.data<double>()[0] > 0;
}

std::vector<double> PlanRunner::busy_seconds() const {
  // By plan device id: in a job of several processes devices_ holds this process's devices only (indexing it by
  // plan device read past its end: AddressSanitizer, Parallel.ProcessesAgree).
  std::vector<double> out(static_cast<size_t>(devices()), 0.0);
  for (const auto& d : devices_) out.at(static_cast<size_t>(d->id)) = d->busy_s;
  return out;
}

void PlanRunner::set_trace(int device, io::TraceLane* lane, io::TraceLane* comm_lane) {
  if (!local_of(device)) return;
  Device& d = *local_of(device);
  d.trace = lane;
  d.comm_trace = comm_lane;
  for (auto& c : d.chunks) c.exec->set_trace(lane);
}

}  // namespace braid::exec
