// The one engine: devices, their worker and communication threads, and the interpretation of the schedule's
// instructions over the backend interface; see engine.h.
#include "exec/engine.h"
#include "exec/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "core/parallel.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

// The dataset's views for one stage program of `slots` slots: every model input in model order, slot by slot; the
// ones the stage reads from `input(name, slot)` (its program's), the others scratch of `micro` samples.
std::vector<Tensor> stage_model_inputs(const StageProgram& p, const io::ModelSpec& m, int slots, int64_t micro,
                                       Program& program) {
  std::vector<Tensor> views;
  for (int s = 0; s < slots; ++s)
    for (const auto& mi : m.inputs) {
      if (std::find(p.model_inputs.begin(), p.model_inputs.end(), mi.name) != p.model_inputs.end()) {
        views.push_back(program.input(mi.name, s));
      } else {
        std::vector<int64_t> dims{micro};
        dims.insert(dims.end(), mi.shape.begin(), mi.shape.end());
        views.push_back(Tensor::empty(TensorDesc{Shape(dims), mi.dtype}));
      }
    }
  return views;
}

io::RunConfig cpu_config(const io::ModelSpec& m, const io::OptimizerSpec& opt, uint64_t seed) {
  io::RunConfig cfg;
  cfg.model = m;
  cfg.optimizer = opt;
  cfg.train.seed = seed;
  return cfg;
}

// BRAID_PREFETCH=0 runs ZeRO-3's gathers inline, on the device thread (A/B runs); read once per process.
bool prefetch_allowed_by_env() {
  static const bool allowed = [] {
    const char* env = std::getenv("BRAID_PREFETCH");
    if (env && std::string_view(env) != "0" && std::string_view(env) != "1")
      std::fprintf(stderr, "braid: warning: BRAID_PREFETCH=%s is neither 0 (off) nor 1 (on, the default); prefetching\n",
                   env);
    return !(env && std::string_view(env) == "0");
  }();
  return allowed;
}

Backend& cpu_backend_ref() {
  Backend* b = backend("cpu");
  BRAID_ASSERT(b != nullptr, "the cpu backend is not registered");
  return *b;
}

}  // namespace

Engine::Engine(const io::ModelSpec& m, const io::OptimizerSpec& opt, const planner::Plan& plan, uint64_t seed,
               EngineOptions options, const PlanWorld* world)
    : Engine(cpu_config(m, opt, seed), plan, cpu_backend_ref(), {}, options, world) {}

Engine::Engine(const io::RunConfig& cfg, const planner::Plan& plan, Backend& backend, std::vector<int> where,
               EngineOptions options, const PlanWorld* world)
    : cfg_(cfg),
      plan_(plan),
      backend_(backend),
      where_(std::move(where)),
      options_(options),
      seed_(cfg.train.seed),
      programs_(options.model ? lower_plan(*options.model, plan, {options.sync_batch_norm, options.half, plan.summary.zero >= 3})
                            : lower_plan(cfg.model, plan, {options.sync_batch_norm, options.half, plan.summary.zero >= 3})),
      schedule_(schedule_of(plan.summary)),
      dp_(plan.summary.data_parallel),
      micro_batches_(static_cast<int>(plan.summary.micro_batches)),
      micro_(plan.summary.micro_batch) {
  const ScheduleCheck check = check_schedule(schedule_);
  BRAID_ASSERT(check.ok, "the ", schedule_.name, " schedule does not check: ", check.message);
  BRAID_ASSERT(schedule_.stages == static_cast<int>(programs_.size()), "schedule has ", schedule_.stages,
               " stages, the plan ", programs_.size());
  stage_slots_ = exec::stage_slots(schedule_);  // each stage's program slots (schedule.h)
  const int n = plan.summary.devices;
  if (where_.empty()) where_.assign(static_cast<size_t>(n), 0);
  BRAID_ASSERT(static_cast<int>(where_.size()) >= n, "a plan of ", n, " devices placed on ", where_.size());
  where_.resize(static_cast<size_t>(n));
  scaling_ = backend_.loss_scaling(cfg_);
  build(world);
}

void Engine::build(const PlanWorld* world) {
  const int n = plan_.summary.devices;
  for (const StageProgram& p : programs_)
    owners_.push_back(plan_.summary.zero >= 1 && p.dp > 1 ? zero_owners(p) : std::map<std::string, int>{});
  std::vector<int> local;
  if (world) {
    local = world->local;
    host_ = world->host;
  } else {
    for (int id = 0; id < n; ++id) local.push_back(id);
  }
  std::vector<int> local_where;
  for (int id : local) local_where.push_back(where_.at(static_cast<size_t>(id)));
  backend_.check_devices(cfg_, local_where);
  local_index_.assign(static_cast<size_t>(n), -1);
  for (int id : local) {
    BRAID_ASSERT(id >= 0 && id < n && local_index_[static_cast<size_t>(id)] < 0, "local device ", id, " of ", n);
    local_index_[static_cast<size_t>(id)] = static_cast<int>(devices_.size());
    auto d = std::make_unique<Dev>();
    d->id = id;
    d->where = where_[static_cast<size_t>(id)];
    d->device = backend_.device(cfg_, d->where);
    devices_.push_back(std::move(d));
  }
  // Parameters first (whole from the seed, then sliced): a device's programs are compiled once its store holds
  // every chunk's shards (an accelerator uploads from it).
  for (const StageProgram& p : programs_)
    for (size_t k = 0; k < p.devices.size(); ++k) {
      Dev* d = local_of(p.devices[k]);
      if (!d) continue;
      d->position = p.stage % plan_.summary.pipeline_stages;
      Chunk c;
      c.prog = &p;
      c.replica = static_cast<int>(k) / p.tp;
      c.tensor_rank = static_cast<int>(k) % p.tp;
      if (!owners_[static_cast<size_t>(p.stage)].empty()) c.owner = &owners_[static_cast<size_t>(p.stage)];
      add_stage_params(p, c.tensor_rank, seed_, d->store);
      // ZeRO stage 2: a replica keeps the gradients of the parameters it updates only; stage 3: and their values.
      if (c.owner && plan_.summary.zero >= 2)
        for (const auto& [name, owner] : *c.owner)
          if (owner != c.replica) {
            ParamEntry& e = *d->store.find(name);
            e.grad = Tensor::empty(TensorDesc{Shape{0}, e.grad.dtype()});
            if (plan_.summary.zero >= 3) e.value = Tensor::empty(TensorDesc{Shape{0}, e.value.dtype()});
          }
      d->chunks.push_back(std::move(c));
    }
  for (auto& d : devices_) {
    BRAID_ASSERT(!d->chunks.empty(), "device ", d->id, " holds no stage");
    for (auto& c : d->chunks) {
      const StageProgram& p = *c.prog;
      ProgramSpec spec;
      spec.prog = &p;
      spec.replica = c.replica;
      spec.tensor_rank = c.tensor_rank;
      spec.slots = stage_slots_[static_cast<size_t>(p.stage)];
      spec.micro_batches = micro_batches_;
      spec.micro = micro_;
      spec.state_owner = c.owner;
      spec.grad_owner = plan_.summary.zero >= 2 ? c.owner : nullptr;
      spec.params_sharded = plan_.summary.zero >= 3 && c.owner;
      spec.bucket_bytes = p.dp > 1 && !spec.grad_owner ? options_.bucket_bytes : 0;
      spec.fuse = options_.fuse;
      c.program = d->device->compile(spec, d->store);
      c.model_inputs = stage_model_inputs(p, cfg_.model, spec.slots, micro_, *c.program);
      c.num_model_inputs = cfg_.model.inputs.size();
      c.pending.assign(c.program->buckets().size(), 0);
    }
    // ZeRO stages 1 and 2: each replica keeps the optimizer state of, and updates, its share of the parameters only.
    d->opt = std::make_unique<Optimizer>(cfg_.optimizer, d->store, [dev = d.get()](const std::string& name) {
      for (const auto& c : dev->chunks)
        if (c.owner && c.owner->count(name)) return c.owner->at(name) == c.replica;
      return true;
    });
    d->device->prepare(d->store, *d->opt, cfg_.optimizer);
    // The step's last backward hands each gradient here as soon as it is final: a full bucket goes to the comm
    // thread (the chunks no longer move: their addresses are stable from here on).
    for (auto& c : d->chunks) {
      if (c.program->buckets().empty() || !backend_.overlapped_comm()) continue;
      c.ready = [this, dev = d.get(), ch = &c](size_t grad) {
        const size_t b = ch->program->bucket_of()[grad];
        if (--ch->pending[b] == 0) submit_bucket(*dev, *ch, b);
      };
    }
  }
  // World communicators: the caller's, or the backend's (in-process queues, NCCL, the job's world).
  if (world && world->communicator) {
    for (auto& d : devices_) d->world = world->communicator(d->id);
  } else {
    WorldSpec ws;
    ws.size = n;
    ws.local = local;
    ws.where = where_;
    ws.host = host_;
    ws.max_messages = micro_batches_ + 1;
    auto worlds = backend_.worlds(ws);
    BRAID_ASSERT(worlds.size() == devices_.size(), "the backend made ", worlds.size(), " world communicators for ",
                 devices_.size(), " devices");
    for (size_t i = 0; i < devices_.size(); ++i) devices_[i]->world = std::move(worlds[i]);
  }
  const int per_device = std::max(1, braid::num_threads() / static_cast<int>(devices_.size()));
  const int places = static_cast<int>(devices_.size());
  const bool pin = backend_.pins_threads() && !world && places > 1;  // every device in this process
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
    Dev* d = devices_[i].get();
    // Each device on its own share of the cores (cpu:4 on 2 cores: two per core). Left to the scheduler, the woken
    // device threads often stacked on one core for milliseconds: the same plan measured 3.0 or 5.6-15.8 ms a step
    // from run to run (docs/planner.md, "What the measurements showed"). Its comm thread goes with it: unpinned,
    // cpu:4's four comm threads on 2 cores sometimes stacked on one core (mlp dp 4: the all-reduce 1.9 ms
    // instead of 0.7).
    const int at = pin ? place[i] : -1;
    threads_.emplace_back([this, d, at, places, per_device]() { worker(*d, at, places, per_device); });
    if (std::any_of(d->chunks.begin(), d->chunks.end(), [&](const Chunk& c) { return c.ready || prefetches(c); }))
      d->comm_thread = std::thread([this, d, at, places]() { comm_worker(*d, at, places); });
  }
}

Engine::~Engine() {
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

void Engine::comm_worker(Dev& d, int place, int places) {
  d.device->enter_thread(place, places, 1);
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(d.comm_mu);
      d.comm_cv.wait(lock, [&]() { return d.comm_quit || !d.comm_queue.empty(); });
      if (d.comm_queue.empty()) return;
      job = std::move(d.comm_queue.front());
      d.comm_queue.pop_front();
    }
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(d.comm_mu);
      error = d.comm_error;
    }
    if (!error) try {  // after a failure the rest are skipped (their communicators are aborted)
        job();
      } catch (...) {
        std::lock_guard<std::mutex> lock(d.comm_mu);
        d.comm_error = std::current_exception();
      }
    {
      std::lock_guard<std::mutex> lock(d.comm_mu);
      ++d.comm_done;
    }
    d.comm_cv.notify_all();
  }
}

uint64_t Engine::Dev::submit(std::function<void()> job) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(comm_mu);
    comm_queue.push_back(std::move(job));
    ticket = ++comm_submitted;
  }
  comm_cv.notify_all();
  return ticket;
}

void Engine::Dev::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(comm_mu);
  comm_cv.wait(lock, [&]() { return comm_done >= ticket; });
  if (comm_error) std::rethrow_exception(comm_error);
}

bool Engine::prefetches(const Chunk& c) const {
  if (!options_.prefetch || !backend_.overlapped_comm() || c.prog->dp < 2 || !prefetch_allowed_by_env()) return false;
  const auto& nodes = c.prog->g.nodes();
  return std::any_of(nodes.begin(), nodes.end(),
                     [](const graph::Node& n) { return n.op->collective_kind == ops::CollectiveKind::ParamGather; });
}

void Engine::submit_bucket(Dev& d, Chunk& c, size_t bucket) {
  c.last_bucket = d.submit([&d, &c, bucket]() {
    Tensor t = c.program->buckets()[bucket];  // the gradients live in it: reduced in place
    io::TraceScope scope(d.comm_trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce grads", -1, -1,
                                                      static_cast<double>(t.bytes())});
    try {
      c.bucket_comm->all_reduce(t, ReduceOp::Avg);
    } catch (...) {
      c.bucket_comm->abort("the gradient all-reduce of device " + std::to_string(d.id) + " failed");
      throw;
    }
  });
}

int Engine::device_at(int stage, int replica, int tensor_rank) const {
  return stage_device(programs_.at(static_cast<size_t>(stage)), replica, tensor_rank);
}

Engine::Dev* Engine::local_of(int device) const {
  if (device < 0 || device >= static_cast<int>(local_index_.size())) return nullptr;
  int i = local_index_[static_cast<size_t>(device)];
  return i < 0 ? nullptr : devices_[static_cast<size_t>(i)].get();
}

std::vector<int> Engine::local_devices() const {
  std::vector<int> out;
  for (const auto& d : devices_) out.push_back(d->id);
  return out;
}

Engine::Chunk* Engine::chunk_of(Dev& d, int stage) {
  for (auto& c : d.chunks)
    if (c.prog->stage == stage) return &c;
  BRAID_ASSERT(false, "device ", d.id, " holds no chunk of stage ", stage);
  return nullptr;
}

std::vector<size_t> Engine::arena_bytes() const {
  std::vector<size_t> out;
  for (const auto& d : devices_) {
    size_t total = 0;
    for (const auto& c : d->chunks) total += c.program->arena_bytes();
    out.push_back(total);
  }
  return out;
}

size_t Engine::device_bytes() const {
  size_t most = 0;
  for (const auto& d : devices_) most = std::max(most, d->device->device_bytes());
  return most;
}

std::vector<DeviceMemory> Engine::memory() const {
  std::vector<DeviceMemory> out;
  for (const auto& d : devices_) out.push_back(d->device->memory());
  return out;
}

size_t Engine::workspace_bytes() const {
  size_t most = 0;
  for (const auto& d : devices_)
    for (const auto& c : d->chunks) most = std::max(most, c.program->workspace_bytes());
  return most;
}

StepResult Engine::step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip) {
  BRAID_ASSERT(static_cast<int64_t>(batch_idx.size()) == micro_ * dp_ * micro_batches_, "a step of ", batch_idx.size(),
               " samples for a plan of ", micro_batches_, " x ", dp_, " x ", micro_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = Job{&data, batch_idx, step, lr, clip, scaling_ ? scaler_.scale() : 1.0};
  ++version_;
  pending_ = static_cast<int>(devices_.size());
  first_error_ = nullptr;
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&]() { return pending_ == 0; });
  if (first_error_) std::rethrow_exception(first_error_);
  for (auto& d : devices_)
    if (d->error) std::rethrow_exception(d->error);
  StepResult r = devices_[0]->result;
  // fp16: the same decision on every device (their sums are the same bits): an overflow skipped the update.
  if (scaling_ && !scaler_.update(std::isfinite(devices_[0]->sq))) ++skipped_;
  return r;
}

void Engine::worker(Dev& d, int place, int places, int threads) {
  try {
    d.device->enter_thread(place, places, threads);
    // Groups first: split() is a collective of the listed devices, so each device makes its own, in stage
    // order (every member of a group meets it at the same point of its sequence).
    for (auto& c : d.chunks) {
      const StageProgram& p = *c.prog;
      if (p.tp > 1) c.tensor_comm = d.world->split(tensor_group(p, c.replica));
      if (p.dp > 1) {
        const std::vector<int> ranks = data_group(p, c.tensor_rank);
        c.data_comm = d.world->split(ranks);
        if (c.ready) c.bucket_comm = d.world->split(ranks);  // the comm thread's own
        if (prefetches(c)) c.gather_comm = d.world->split(ranks);
      }
      c.program->set_groups(c.tensor_comm.get(), c.data_comm.get());
      if (c.gather_comm) c.program->set_gather_prefetch(c.gather_comm.get(), &d);
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

void Engine::run_step(Dev& d, const Job& job) {
  const int M = micro_batches_;
  const int64_t micro_global = micro_ * dp_;
  PhaseTimes* phases = d.id == 0 ? phases_ : nullptr;  // `braid time`: plan device 0's
  for (auto& c : d.chunks) {
    c.backwards = 0;
    c.last_bucket = 0;
    c.slots.reset(c.prog->stage, c.program->slots(), M);
    const auto& of = c.program->bucket_of();
    std::fill(c.pending.begin(), c.pending.end(), 0);
    for (size_t b : of) ++c.pending[b];
    if (scaling_) c.program->set_loss_scale(job.loss_scale);  // the loss stage seeds it; every stage divides
  }
  double loss_sum = 0;
  for (const Instr& in : schedule_.per_device[static_cast<size_t>(d.position)]) {
    Chunk& c = *chunk_of(d, in.stage);
    const StageProgram& p = *c.prog;
    Program& prog = *c.program;
    const int mb = in.micro_batch;
    const RunIds ids{seed_, static_cast<uint64_t>(job.step * M + mb), c.replica * micro_};
    switch (in.kind) {
      case InstrKind::Forward: {
        int slot = c.slots.take(mb);
        if (!p.model_inputs.empty()) {
          auto t0 = Clock::now();
          auto begin = job.batch_idx.begin() + mb * micro_global + ids.batch_offset;
          d.scratch.assign(begin, begin + micro_);
          std::span<Tensor> views(c.model_inputs.data() + static_cast<size_t>(slot) * c.num_model_inputs,
                                  c.num_model_inputs);
          io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Data, {}, {}, "read", mb});
          job.data->read(d.scratch, views);  // thread-safe (io::Dataset::read): the devices read in parallel
          if (phases) phases->data_s += seconds_since(t0);
        }
        prog.set_trace_micro_batch(mb);
        auto t0 = Clock::now();
        prog.forward(slot, ids);
        if (p.loss.valid() && c.tensor_rank == 0) loss_sum += prog.scalar(p.loss, slot) / static_cast<double>(M * dp_);
        const double s = seconds_since(t0);
        d.busy_s += s;
        if (phases) phases->graph_s += s;
        break;
      }
      case InstrKind::Backward: {
        int slot = c.slots.take(mb);
        prog.set_trace_micro_batch(mb);
        auto t0 = Clock::now();
        // The step's last backward of this stage: gradients go to their buckets as they become final, and a full
        // bucket starts its all-reduce while backward goes on (Chunk::ready).
        const bool last = c.backwards == M - 1;
        prog.backward(slot, ids, c.backwards, M, last && c.ready ? &c.ready : nullptr);
        const double s = seconds_since(t0);
        d.busy_s += s;
        if (phases) phases->graph_s += s;
        ++c.backwards;
        if (p.stage == 0) c.slots.release(mb);  // nothing to send back: the micro-batch is done
        break;
      }
      case InstrKind::SendActivation:  // to every tensor rank of the next stage, from tensor rank 0
        move_boundary(d, c, in, p.stage + 1, p.stage, p.send_values, p.send, false);
        break;
      case InstrKind::RecvActivation:
        move_boundary(d, c, in, p.stage - 1, p.stage - 1, p.recv_values, p.recv, false);
        break;
      case InstrKind::SendGrad:
        move_boundary(d, c, in, p.stage - 1, p.stage - 1, p.recv_grads, p.recv, true);
        c.slots.release(mb);
        break;
      case InstrKind::RecvGrad:
        move_boundary(d, c, in, p.stage + 1, p.stage, p.send_grads, p.send, true);
        break;
      case InstrKind::AllReduceGrads: {
        if (prog.buckets().empty()) break;
        if (!c.ready) {  // no overlap on this backend: the buckets here, in order, on the data group
          for (Tensor t : prog.buckets()) {
            io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce grads", mb, -1,
                                                         static_cast<double>(t.bytes())});
            c.data_comm->all_reduce(t, ReduceOp::Avg);
          }
          break;
        }
        io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "wait all_reduce grads"});
        if (c.last_bucket) d.wait(c.last_bucket);  // started during the last backward; usually done by now
        break;
      }
      case InstrKind::OptimizerStep:
        break;  // one update of the device's whole store after the list (clipping needs every gradient)
    }
  }
  finish_step(d, job, loss_sum);
}

void Engine::move_boundary(Dev& d, Chunk& c, const Instr& in, int peer_stage, int boundary,
                           const std::vector<ValueId>& values, const std::vector<BoundaryValue>& names, bool grads) {
  const int slot = c.slots.take(in.micro_batch);
  const bool send = in.kind == InstrKind::SendActivation || in.kind == InstrKind::SendGrad;
  if (send && c.tensor_rank != 0) return;
  // A send goes to every tensor rank of the peer stage, a receive comes from its tensor rank 0.
  const int peers = send ? programs_[static_cast<size_t>(peer_stage)].tp : 1;
  for (size_t k = 0; k < values.size(); ++k) {
    if (!values[k].valid()) continue;  // no gradient for this value
    Tensor v = c.program->value(values[k], slot);
    for (int t = 0; t < peers; ++t) {
      const int peer = device_at(peer_stage, c.replica, t);
      io::TraceScope scope(d.trace, io::TraceLabel{send ? io::TraceKind::Send : io::TraceKind::Recv, {}, {},
                                                   grads ? names[k].grad_name : names[k].name, in.micro_batch, peer,
                                                   static_cast<double>(v.bytes())});
      if (send) d.world->send(v, peer, boundary_tag(boundary, k, grads));
      else d.world->recv(v, peer, boundary_tag(boundary, k, grads));
    }
  }
}

void Engine::finish_step(Dev& d, const Job& job, double loss_sum) {
  const auto t0 = Clock::now();
  // The loss (held by the loss stage's tensor rank 0 of each replica) and the global gradient norm: sums over the
  // world in rank order. A gradient counts once: replica 0's, tensor rank 0's unless it is a slice.
  double sums[2] = {loss_sum, 0.0};
  if (job.clip > 0 || scaling_) {
    io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "grad norm"});
    sums[1] = d.device->grad_sum_squares();
  }
  {
    io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "all_reduce loss, norm"});
    d.device->all_reduce_sum(*d.world, sums);
  }
  io::TraceScope scope(d.trace, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
  d.result.loss = sums[0];
  d.sq = sums[1];
  d.result.grad_norm = job.clip > 0 ? std::sqrt(sums[1]) : -1;
  if (scaling_ && !std::isfinite(sums[1])) return;  // an fp16 overflow somewhere: no device updates
  if (job.clip > 0) {
    const double coef = clip_coefficient(std::sqrt(sums[1]), job.clip);
    if (coef < 1.0) d.device->scale_grads(coef);
  }
  d.device->update(job.lr);
  // ZeRO stages 1 and 2: every parameter from the replica that updated it, to the others of its data-parallel group
  // (stage 3: nobody else holds it).
  for (auto& c : d.chunks) {
    if (!c.owner || plan_.summary.zero >= 3) continue;
    io::TraceScope bs(d.trace, io::TraceLabel{io::TraceKind::Collective, {}, {}, "broadcast params"});
    for (const auto& [name, owner] : *c.owner) {
      Tensor t = c.program->param(name);
      c.data_comm->broadcast(t, owner);
    }
    c.program->params_changed();
  }
  if (d.id == 0 && phases_) phases_->optimizer_s += seconds_since(t0);
}

int Engine::state_owner(const StageProgram& p, const std::string& name) const {
  const auto& owners = owners_[static_cast<size_t>(p.stage)];  // the same partition on every process
  auto it = owners.find(name);
  return it == owners.end() ? 0 : it->second;
}

ParamStore* Engine::whole_store() {
  if (programs_.size() != 1 || programs_[0].tp != 1 || !backend_.host_memory() || !local_of(0)) return nullptr;
  if (plan_.summary.zero >= 1 && programs_[0].dp > 1) return nullptr;  // device 0 holds a share of the state
  return &local_of(0)->store;
}

Optimizer* Engine::whole_optimizer() { return whole_store() ? local_of(0)->opt.get() : nullptr; }

void Engine::gather(ParamStore& full, Optimizer* full_opt) {
  for (auto& d : devices_) d->device->download(full_opt != nullptr);
  if (full_opt) full_opt->loss_scale = scaling_ ? scaler_.state() : LossScaleState{};  // scale 0: none (not fp16)
  if (&full == whole_store()) return;  // device 0 holds the whole model in host memory: nothing to copy
  Communicator* between = host_ ? host_ : devices_[0]->world.get();  // between processes each holds one device
  gather_shards(
      programs_,
      [&](int id) {
        Dev* d = local_of(id);
        return d ? ShardHolder{&d->store, d->opt.get()} : ShardHolder{};
      },
      between, full, full_opt,
      plan_.summary.zero >= 1 ? StateOwner([this](const StageProgram& p, const std::string& name) {
        return state_owner(p, name);
      })
                              : StateOwner{},
      plan_.summary.zero >= 3);
  if (full_opt && local_of(0)) full_opt->set_steps_taken(local_of(0)->opt->steps_taken());
}

void Engine::scatter(const ParamStore& full, const Optimizer* full_opt) {
  for (auto& d : devices_) {
    if (&full != &d->store) {
      for (auto& c : d->chunks) scatter_stage(*c.prog, c.tensor_rank, full, full_opt, d->store, d->opt.get());
      if (full_opt) d->opt->set_steps_taken(full_opt->steps_taken());
    }
    d->device->upload(full_opt != nullptr);
  }
  ++version_;
  if (full_opt && scaling_) scaler_ = LossScaler(full_opt->loss_scale);  // none saved (not fp16): the initial scale
}

std::vector<std::pair<std::string, double>> Engine::evaluate(ParamStore& full, io::Dataset& data,
                                                             std::span<const int64_t> idx) {
  BRAID_ASSERT(local_of(0), "evaluation runs in plan device 0's process");
  if (!evaluator_) evaluator_ = make_evaluator(backend_, cfg_, full, local_of(0)->where, options_.half, options_.eval);
  return evaluator_->run(data, idx, version_);
}

std::vector<std::vector<size_t>> Engine::bucket_bytes(int device) const {
  std::vector<std::vector<size_t>> out;
  if (!local_of(device)) return out;
  const Dev& d = *local_of(device);
  for (const auto& c : d.chunks) {
    out.emplace_back();
    for (const Tensor& b : c.program->buckets()) out.back().push_back(b.bytes());
  }
  return out;
}

bool Engine::any(bool flag) {
  if (!host_) return flag;  // one process: every device sees the same flag
  Tensor t = Tensor::empty(TensorDesc{Shape{1}, DType::f64});
  t.data<double>()[0] = flag ? 1.0 : 0.0;
  host_->all_reduce(t, ReduceOp::Max);  // the job's world, idle between steps
  return t.data<double>()[0] > 0;
}

std::vector<double> Engine::busy_seconds() const {
  // By plan device id: in a job of several processes devices_ holds this process's devices only (indexing it by
  // plan device read past its end: AddressSanitizer, Parallel.ProcessesAgree).
  std::vector<double> out(static_cast<size_t>(devices()), 0.0);
  for (const auto& d : devices_) out.at(static_cast<size_t>(d->id)) = d->busy_s;
  return out;
}

void Engine::set_trace(int device, io::TraceLane* lane, io::TraceLane* comm_lane) {
  if (!local_of(device)) return;
  Dev& d = *local_of(device);
  d.trace = lane;
  d.comm_trace = comm_lane;
  for (auto& c : d.chunks) c.program->set_trace(lane);
}

bool Engine::set_node_timing(double* node_seconds, PhaseTimes* phases) {
  if (programs_.size() != 1 || !local_of(0)) return false;
  if (!local_of(0)->chunks[0].program->set_node_timing(node_seconds, phases)) return false;
  node_seconds_ = node_seconds;
  phases_ = node_seconds ? phases : nullptr;
  return true;
}

std::vector<size_t> Engine::fused() const {
  return local_of(0) ? local_of(0)->chunks[0].program->fused() : std::vector<size_t>{};
}

void Engine::synchronize() {
  for (auto& d : devices_) d->device->synchronize();
}

std::string Engine::describe() const { return backend_.describe(cfg_, where_); }

double Engine::peak_flops() const { return backend_.peak_flops(where_); }

std::vector<std::pair<std::string, double>> Engine::step_metrics() const {
  if (!scaling_) return {};
  return {{"loss_scale", scaler_.scale()}, {"skipped_steps", static_cast<double>(skipped_)}};
}

}  // namespace braid::exec
