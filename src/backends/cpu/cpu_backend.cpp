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
#include "backends/cpu/executor.h"
#include "backends/cpu/cpu_graph.h"
#include "exec/stage_policy.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

class CpuProgram final : public Program {
 public:
  CpuProgram(const ProgramSpec& spec, ParamStore& store)
      : p_(*spec.prog), policy_(spec), store_(store), M_(spec.micro_batches) {
    for (const auto& gr : policy_.grads()) grads_.emplace_back(gr.value, store.index_of(gr.name));
    if (spec.bucket_bytes > 0) make_buckets(spec.bucket_bytes);
    ExecutorOptions eo = policy_.executor_options();
    // One micro-batch a step in one slot: backward writes the gradients straight into the store (into their
    // buckets), instead of into the arena and then a copy (accumulate) into the store.
    grads_in_store_ = spec.micro_batches == 1 && spec.slots == 1 && !policy_.reduces_to_owner();
    if (grads_in_store_)
      for (const auto& [grad, entry] : grads_) eo.external.emplace_back(grad, store.entries()[entry].grad);
    exec_ = std::make_unique<Executor>(p_.g, store, policy_.keep(), eo);
    hook_ = [this](size_t node) {
      for (size_t gi : policy_.grads_at(node)) {
        if (!grads_in_store_) accumulate_one(gi, hook_slot_, hook_first_);
        (*ready_)(gi);
      }
    };
    shard_hook_ = [this](size_t node) {  // ZeRO-2: the owner adds this micro-batch's average (/ M) to what it keeps
      for (size_t gi : policy_.grads_at(node)) {
        Tensor v = exec_->value(grads_[gi].first, hook_slot_);
        if (policy_.reduce_to_owner(gi, v, *data_, lane_, trace_mb_))
          accumulate(store_.entries()[grads_[gi].second].grad, v, 1.0 / M_, hook_first_);
      }
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
  void forward(int slot, const RunIds& ids) override {
    exec_->run_forward(slot, ids.seed, ids.stream, ids.batch_offset, ids.training);
  }

  void backward(int slot, const RunIds& ids, int k, int M, const std::function<void(size_t)>* ready) override {
    BRAID_ASSERT(M == M_, "a step of ", M, " micro-batches for a program built for ", M_);
    // Each gradient handled right after the node that produces it: reduced to its owner (ZeRO-2, every micro-batch:
    // shard_hook_), or accumulated and handed on to its bucket (the step's last backward: hook_).
    BRAID_ASSERT(!policy_.reduces_to_owner() || data_, "gradient shards without a data-parallel group");
    if (const std::function<void(size_t)>* hook = policy_.reduces_to_owner() ? &shard_hook_ : ready ? &hook_ : nullptr) {
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
  const StageProgram& stage() const { return p_; }
  const StagePolicy& policy() const { return policy_; }

 private:
  void accumulate_one(size_t gi, int slot, bool first) {
    const auto& [grad, entry] = grads_[gi];
    accumulate(store_.entries()[entry].grad, exec_->value(grad, slot), 1.0 / M_, first);
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
  StagePolicy policy_;
  ParamStore& store_;
  int M_ = 1;
  std::vector<std::pair<ValueId, size_t>> grads_;  // per policy_.grads(): gradient value, store entry
  Communicator* data_ = nullptr;
  io::TraceLane* lane_ = nullptr;
  int trace_mb_ = -1;
  std::function<void(size_t)> shard_hook_;
  bool grads_in_store_ = false;
  std::vector<Tensor> buckets_;
  std::vector<size_t> bucket_of_;
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
    auto p = std::make_unique<CpuProgram>(spec, store);
    progs_.push_back(p.get());
    arena_ += p->arena_bytes() + p->workspace_bytes();
    return p;
  }

  void prepare(ParamStore& store, Optimizer& opt, const io::OptimizerSpec&) override {
    store_ = &store;
    opt_ = &opt;
  }

  double grad_sum_squares() override {
    double sq = 0;
    for (const CpuProgram* p : progs_)
      for (const auto& sh : p->stage().params)
        if (p->policy().counts_in_norm(sh))  // the shard itself: no search by name inside the step
          if (const ParamEntry* e = store_->find(sh.name); e->has_grad) sq += sum_squares(e->grad);
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
  std::vector<const CpuProgram*> progs_;  // owned by the engine's chunks, which outlive this device's use
  ParamStore* store_ = nullptr;
  Optimizer* opt_ = nullptr;
  size_t arena_ = 0;
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

  bool pins_threads() const override { return true; }
  bool host_memory() const override { return true; }
  bool overlapped_comm() const override { return true; }
  double peak_flops(const std::vector<int>&) const override { return 0; }
  std::string describe(const io::RunConfig& cfg, const std::vector<int>&) const override { return cfg.devices; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace braid::exec
