// The CPU backend (exec/backend.h): stage programs on exec::Executor, gradients in the device's ParamStore (in
// their buckets' flat tensors when they are all-reduced, so that the all-reduce works in place), the update by
// exec::Optimizer, in-process queues between the devices of one process. Device memory is host memory: the
// engine's store of a device is its parameters.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/parallel.h"
#include "backends/cpu_planning.h"
#include "exec/backend.h"
#include "exec/comm/inproc.h"
#include "exec/executor.h"
#include "exec/runner.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

class CpuProgram final : public Program {
 public:
  CpuProgram(const ProgramSpec& spec, ParamStore& store)
      : p_(*spec.prog), store_(store), M_(spec.micro_batches), replica_(spec.replica) {
    for (const auto& pi : p_.g.params())
      if (pi.grad.valid()) {
        grads_.emplace_back(pi.grad, store.index_of(pi.name));
        if (spec.grad_owner) owner_of_.push_back(spec.grad_owner->at(pi.name));
      }
    BRAID_ASSERT(!spec.grad_owner || spec.bucket_bytes == 0, "gradient shards are reduced one by one, not in buckets");
    if (spec.bucket_bytes > 0) make_buckets(spec.bucket_bytes);
    grads_at_node_.assign(p_.g.nodes().size(), {});
    for (size_t gi = 0; gi < grads_.size(); ++gi)
      grads_at_node_[p_.g.value(grads_[gi].first).producer.idx()].push_back(gi);
    std::vector<ValueId> keep = p_.keep;
    if (spec.grad_owner) {
      // ZeRO-2: a gradient is reduced to its owner (and accumulated there) right after the node that makes it, so
      // the arena holds it only for that node: the memory plan may give its bytes to later values.
      std::erase_if(keep, [&](ValueId v) {
        return std::any_of(grads_.begin(), grads_.end(), [&](const auto& g) { return g.first == v; });
      });
    }
    ExecutorOptions eo;
    if (spec.params_sharded) {
      eo.param_owner = spec.grad_owner;
      eo.replica = spec.replica;
    }
    eo.slots = spec.slots;
    if (spec.slots > 1) eo.stash = p_.stash;  // one slot: one region, packed as a single-device graph is
    eo.fuse = spec.fuse;
    // One micro-batch a step in one slot: backward writes the gradients straight into the store (into their
    // buckets), instead of into the arena and then a copy (accumulate) into the store.
    grads_in_store_ = spec.micro_batches == 1 && spec.slots == 1 && !spec.grad_owner;
    if (grads_in_store_)
      for (const auto& [grad, entry] : grads_) eo.external.emplace_back(grad, store.entries()[entry].grad);
    exec_ = std::make_unique<Executor>(p_.g, store, keep, eo);
    hook_ = [this](size_t node) {
      for (size_t gi : grads_at_node_[node]) {
        if (!grads_in_store_) accumulate_one(gi, hook_slot_, hook_first_);
        (*ready_)(gi);
      }
    };
    shard_hook_ = [this](size_t node) {
      for (size_t gi : grads_at_node_[node]) reduce_to_owner(gi, hook_slot_, hook_first_);
    };
  }

  Tensor input(const std::string& name, int slot) override { return exec_->input(name, slot); }
  Tensor value(ValueId v, int slot) override { return exec_->value(v, slot); }
  Tensor param(const std::string& name) override { return store_.find(name)->value; }
  double scalar(ValueId v, int slot) override { return exec::scalar(exec_->value(v, slot)); }
  void set_groups(Communicator* tensor, Communicator* data) override {
    exec_->set_groups(tensor, data);
    data_ = data;
  }
  void set_gather_prefetch(Communicator* gather, CommQueue* queue) override { exec_->set_gather_prefetch(gather, queue); }
  void forward(int slot, const RunIds& ids) override { exec_->run_forward(slot, ids.seed, ids.stream, ids.batch_offset); }

  void backward(int slot, const RunIds& ids, int k, int M, const std::function<void(size_t)>* ready) override {
    BRAID_ASSERT(M == M_, "a step of ", M, " micro-batches for a program built for ", M_);
    // Each gradient handled right after the node that produces it: reduced to its owner (ZeRO-2, every micro-batch:
    // shard_hook_), or accumulated and handed on to its bucket (the step's last backward: hook_).
    BRAID_ASSERT(owner_of_.empty() || data_, "gradient shards without a data-parallel group");
    if (const std::function<void(size_t)>* hook = !owner_of_.empty() ? &shard_hook_ : ready ? &hook_ : nullptr) {
      ready_ = ready;
      hook_slot_ = slot;
      hook_first_ = k == 0;
      exec_->set_after_node(hook);
      exec_->run_backward(slot, ids.seed, ids.stream, ids.batch_offset);
      exec_->set_after_node(nullptr);
      return;
    }
    exec_->run_backward(slot, ids.seed, ids.stream, ids.batch_offset);
    if (grads_in_store_) return;
    const auto t0 = phases_ ? Clock::now() : Clock::time_point{};
    for (size_t gi = 0; gi < grads_.size(); ++gi) accumulate_one(gi, slot, k == 0);
    if (phases_) phases_->accumulate_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  const std::vector<Tensor>& buckets() const override { return buckets_; }
  const std::vector<size_t>& bucket_of() const override { return bucket_of_; }
  void set_loss_scale(double s) override {
    BRAID_ASSERT(s == 1.0, "loss scaling is for fp16 on accelerators; CPU devices train in f32");
  }
  void set_trace(io::TraceLane* lane) override {
    exec_->set_trace(lane);
    lane_ = lane;
  }
  void set_trace_micro_batch(int mb) override {
    exec_->set_trace_micro_batch(mb);
    trace_mb_ = mb;
  }
  bool set_node_timing(double* node_seconds, PhaseTimes* phases) override {
    exec_->set_node_timing(node_seconds);
    phases_ = node_seconds ? phases : nullptr;
    return true;
  }
  std::vector<size_t> fused() const override { return exec_->fused(); }
  int slots() const override { return exec_->slots(); }
  size_t arena_bytes() const override {
    return exec_->plan().arena_bytes + exec_->plan().slot_bytes * static_cast<size_t>(exec_->slots());
  }
  size_t workspace_bytes() const override { return exec_->plan().workspace_bytes; }

 private:
  void accumulate_one(size_t gi, int slot, bool first) {
    const auto& [grad, entry] = grads_[gi];
    accumulate(store_.entries()[entry].grad, exec_->value(grad, slot), 1.0 / M_, first);
  }

  // ZeRO-2: this micro-batch's gradient, averaged over the data group into its owner, which adds it (/ M) to the
  // gradient it keeps; the other replicas' copies were scratch.
  void reduce_to_owner(size_t gi, int slot, bool first) {
    const auto& [grad, entry] = grads_[gi];
    Tensor v = exec_->value(grad, slot);
    {
      io::TraceScope scope(lane_, io::TraceLabel{io::TraceKind::Collective, {}, {}, "reduce grad", trace_mb_, -1,
                                                 static_cast<double>(v.bytes())});
      data_->reduce(v, owner_of_[gi], ReduceOp::Avg);
    }
    if (owner_of_[gi] == replica_) accumulate(store_.entries()[entry].grad, v, 1.0 / M_, first);
  }

  // Buckets of gradients in the order backward produces them (their producer nodes), each up to `limit` bytes (a
  // larger gradient is a bucket of its own). A bucket of several gradients is one flat tensor and the gradients
  // live in it (views, each on a 64-byte boundary; the gaps stay zero), so the all-reduce works on them in place:
  // no packing before it and no unpacking after (PyTorch DDP's gradient_as_bucket_view). Packing and unpacking had
  // cost two copies of every gradient per step (a quarter of the CPU time of mlp dp 4 on cpu:4 by `perf`).
  void make_buckets(size_t limit) {
    const graph::Graph& g = p_.g;
    auto& entries = store_.entries();
    std::vector<size_t> order(grads_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return g.value(grads_[a].first).producer.v < g.value(grads_[b].first).producer.v;
    });
    bucket_of_.assign(grads_.size(), 0);
    std::vector<std::vector<size_t>> members;
    size_t bytes = 0;
    for (size_t gi : order) {
      const Tensor& grad = entries[grads_[gi].second].grad;
      if (members.empty() || (bytes + grad.bytes() > limit && bytes > 0) ||
          grad.dtype() != entries[grads_[members.back().front()].second].grad.dtype()) {
        members.emplace_back();
        bytes = 0;
      }
      members.back().push_back(gi);
      bucket_of_[gi] = members.size() - 1;
      bytes += grad.bytes();
    }
    auto aligned = [](size_t n) { return (n + 63) / 64 * 64; };
    for (const auto& m : members) {
      Tensor& first = entries[grads_[m[0]].second].grad;
      if (m.size() < 2) {
        buckets_.push_back(first);
        continue;
      }
      const DType dt = first.dtype();
      size_t total = 0;
      for (size_t gi : m) total += aligned(entries[grads_[gi].second].grad.bytes());
      Tensor flat = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(total / dtype_size(dt))}, dt});
      size_t off = 0;
      for (size_t gi : m) {
        Tensor& grad = entries[grads_[gi].second].grad;
        Tensor view = flat.part(off, grad.desc());
        view.copy_from(grad);
        grad = view;
        off += aligned(grad.bytes());
      }
      buckets_.push_back(flat);
    }
  }

  const StageProgram& p_;
  ParamStore& store_;
  int M_ = 1;
  int replica_ = 0;
  std::vector<std::pair<ValueId, size_t>> grads_;  // gradient value, store entry
  std::vector<int> owner_of_;                      // ZeRO-2: per gradient, the replica keeping it; else empty
  Communicator* data_ = nullptr;
  io::TraceLane* lane_ = nullptr;
  int trace_mb_ = -1;
  std::function<void(size_t)> shard_hook_;
  bool grads_in_store_ = false;
  std::vector<Tensor> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<std::vector<size_t>> grads_at_node_;  // per node: the gradients it produces
  std::unique_ptr<Executor> exec_;
  std::function<void(size_t)> hook_;
  const std::function<void(size_t)>* ready_ = nullptr;
  int hook_slot_ = 0;
  bool hook_first_ = false;
  PhaseTimes* phases_ = nullptr;
};

class CpuDevice final : public Device {
 public:
  void enter_thread(int place, int places, int threads) override {
    if (place >= 0) pin_thread_to_share(place, places);
    omp_set_num_threads(threads);
  }

  std::unique_ptr<Program> compile(const ProgramSpec& spec, ParamStore& store) override {
    progs_.push_back(Counted{spec.prog, spec.replica, spec.tensor_rank, spec.grad_owner});
    auto p = std::make_unique<CpuProgram>(spec, store);
    arena_ += p->arena_bytes() + p->workspace_bytes();
    return p;
  }

  void prepare(ParamStore& store, Optimizer& opt, const io::OptimizerSpec&) override {
    store_ = &store;
    opt_ = &opt;
  }

  double grad_sum_squares() override {
    double sq = 0;
    // A gradient counts once: replica 0's, or (ZeRO-2) its owner's, the only one holding it.
    for (const auto& c : progs_) {
      if (!c.owner && c.replica != 0) continue;
      for (const auto& sh : c.prog->params) {
        if (sh.buffer || !shard_counts(sh, c.tensor_rank)) continue;
        if (c.owner)
          if (auto it = c.owner->find(sh.name); it == c.owner->end() || it->second != c.replica) continue;
        const ParamEntry* e = store_->find(sh.name);
        if (e->has_grad) sq += sum_squares(e->grad);
      }
    }
    return sq;
  }

  void scale_grads(double k) override {
    for (auto& e : store_->entries())
      if (!e.spec.buffer && e.has_grad) scale_in_place(e.grad, k);
  }

  void update(double lr) override { opt_->step(lr); }
  void download(bool) override {}  // the store is the device's memory
  void upload(bool) override {}

  size_t device_bytes() const override { return memory().total(); }

  DeviceMemory memory() const override {
    DeviceMemory m;
    m.arena = arena_;
    for (const auto& e : store_->entries()) {
      m.parameters += e.value.bytes();
      if (e.has_grad) m.gradients += e.grad.bytes();
    }
    for (const auto& [name, st] : std::as_const(*opt_).state())
      for (const auto& [key, t] : st) m.optimizer += t.bytes();
    return m;
  }

  void all_reduce_sum(Communicator& world, std::span<double> v) override {
    Tensor t = Tensor::view(v.data(), TensorDesc{Shape{static_cast<int64_t>(v.size())}, DType::f64});
    world.all_reduce(t, ReduceOp::Sum);
  }

 private:
  struct Counted {
    const StageProgram* prog;
    int replica, tensor_rank;
    const std::map<std::string, int>* owner;
  };
  std::vector<Counted> progs_;
  ParamStore* store_ = nullptr;
  Optimizer* opt_ = nullptr;
  size_t arena_ = 0;
};

// The whole model's evaluation graph per batch size (the last batch of a set may be smaller) over the host store.
class CpuEvaluator final : public Evaluator {
 public:
  CpuEvaluator(const io::RunConfig& cfg, ParamStore& store, const graph::Graph* eval) : cfg_(cfg), store_(store), eval_(eval) {}
  std::vector<std::pair<std::string, double>> run(io::Dataset& data, std::span<const int64_t> idx, int64_t) override {
    const auto b = static_cast<int64_t>(idx.size());
    auto& r = runners_[b];
    if (!r && eval_ && eval_->batch() == b) r = make_runner(*eval_, cfg_.model, store_, cfg_.train.seed);
    if (!r) r = make_runner(cfg_.model, b, false, store_, cfg_.train.seed);
    data.read(idx, r->inputs);
    r->exec->run(false, cfg_.train.seed, 0);
    std::vector<std::pair<std::string, double>> vals{{"loss", scalar(r->exec->value(r->g.loss()))}};
    for (const auto& [name, v] : r->g.metrics) vals.emplace_back(name, scalar(r->exec->value(v)));
    return vals;
  }

 private:
  const io::RunConfig& cfg_;
  ParamStore& store_;
  const graph::Graph* eval_;  // the run's evaluation graph, or null
  std::map<int64_t, std::unique_ptr<Runner>> runners_;
};

class CpuBackend final : public CpuPlanning {  // its run-setup answers: backends/cpu_planning.h
 public:
  std::string name() const override { return "cpu"; }
  // Every op with a CPU kernel, at every floating dtype (16-bit values run on f32 copies: Executor::run_widened).
  bool supports(const ops::OpDef& op, DType) const override { return op.collective || op.cpu != nullptr; }
  void check_devices(const io::RunConfig&, const std::vector<int>&) const override {}
  std::unique_ptr<Device> device(const io::RunConfig&, int) override { return std::make_unique<CpuDevice>(); }

  std::vector<std::unique_ptr<Communicator>> worlds(const WorldSpec& spec) override {
    std::vector<std::unique_ptr<Communicator>> out;
    if (spec.host) {  // a job of several processes: the job's world (TCP), one device per process
      BRAID_ASSERT(spec.local.size() == 1, "a process of a job runs one cpu device, not ", spec.local.size());
      out.push_back(borrow(*spec.host));
      return out;
    }
    InProcWorld world(spec.size, InProcOptions{std::chrono::milliseconds(300'000), spec.max_messages});
    for (int id : spec.local) out.push_back(world.communicator(id));  // each keeps the world's state alive
    return out;
  }

  std::unique_ptr<Evaluator> evaluator(const io::RunConfig& cfg, ParamStore& store, int, DType,
                                       const graph::Graph* eval) override {
    return std::make_unique<CpuEvaluator>(cfg, store, eval);
  }
  bool pins_threads() const override { return true; }
  bool host_memory() const override { return true; }
  bool overlapped_comm() const override { return true; }
  double peak_flops(const std::vector<int>&) const override { return 0; }
  std::string describe(const io::RunConfig& cfg, const std::vector<int>&) const override { return cfg.devices; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace braid::exec
