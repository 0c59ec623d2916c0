// The CUDA backend (cuda_backend.h, exec/backend.h).
#include <algorithm>
#include <map>
#include <mutex>

#include "backends/cuda_planning.h"
#include "exec/comm/inproc.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_executor.h"
#include "backends/cuda/cuda_optimizer.h"
#include "backends/cuda/nccl_comm.h"
#include "backends/cuda/staged_comm.h"
#include "exec/run_data.h"
#include "exec/stage_policy.h"
#include "backends/cuda/kernels/device_info.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/runtime.h"

namespace braid::exec {
namespace {

CudaExecutorOptions precision_options(const io::RunConfig& cfg) {
  CudaExecutorOptions co;
  co.bf16 = cfg.train.precision == "bf16";
  co.f16 = cfg.train.precision == "f16";  // with dynamic loss scaling (the engine's)
  co.mirror_keep = false;  // the loss alone is fetched, a few bytes
  return co;
}

class CudaProgram final : public Program {
 public:
  CudaProgram(const io::RunConfig& cfg, const ProgramSpec& spec, ParamStore& store, CudaExecutorOptions co)
      : p_(*spec.prog), policy_(spec), sharded_(spec.state_owner != nullptr) {
    // ZeRO-2: the executor synchronised its stream before the hook; each owner adds its share to its accumulator.
    shard_hook_ = [this](size_t node) {
      for (size_t gi : policy_.grads_at(node)) {
        const ValueId grad = policy_.grads()[gi].value;
        Tensor v = exec_->device_value(grad, hook_slot_);
        if (policy_.reduce_to_owner(gi, v, *data_, lane_, hook_mb_)) opt_->accumulate_one(grad, v, hook_mb_, loss_scale_);
      }
    };
    auto owned = [this](const std::string& name) { return policy_.owns_state(name); };
    try {
      exec_ = std::make_unique<CudaExecutor>(p_.g, store, policy_.keep(), policy_.executor_options(), co);
      // Data-parallel stages: accumulators even for one micro-batch, one block to all-reduce (ZeRO-2 and 3: one per
      // gradient this replica keeps).
      opt_ = std::make_unique<CudaOptimizer>(*exec_, cfg.optimizer, spec.micro_batches, p_.dp > 1, owned,
                                             policy_.reduces_to_owner());
    } catch (const cuda::DeviceOutOfMemory& e) {
      throw UserError(SourceLoc{cfg.path, 0, 0},
                      std::string(e.what()) + ": stage " + std::to_string(p_.stage) + " on cuda:" +
                          std::to_string(co.device) + " at a micro-batch of " + std::to_string(spec.micro) +
                          " samples, its parameters, gradients and optimizer state do not fit",
                      "lower train.micro_batch (the step accumulates gradients over micro-batches), or a plan with "
                      "more pipeline stages or tensor parallelism");
    }
    // Received activations and gradients arrive in device memory: the forward must not stage over them.
    std::vector<ValueId> fed = p_.recv_values;
    fed.insert(fed.end(), p_.send_grads.begin(), p_.send_grads.end());
    exec_->set_device_fed(fed);
    opt_->set_norm_params([this](const std::string& name) { return policy_.counts_in_norm(name); });
    if (p_.dp > 1 && !policy_.reduces_to_owner()) {
      buckets_.push_back(opt_->flat_gradients());  // every gradient of the stage: one all-reduce
      for (const auto& pi : p_.g.params())
        if (pi.grad.valid()) bucket_of_.push_back(0);
    }
  }

  Tensor input(const std::string& name, int slot) override { return exec_->input(name, slot); }
  Tensor value(ValueId v, int slot) override { return exec_->device_value(v, slot); }
  Tensor param(const std::string& name) override { return exec_->device_param(name); }
  void params_changed() override { exec_->params_changed(); }
  double scalar(ValueId v, int slot) override {  // a kept value: the loss, an evaluation's metrics
    auto [it, fresh] = fetched_.try_emplace(v.idx());
    if (fresh) it->second = Tensor::empty(p_.g.value(v).desc);
    exec_->fetch(v, it->second, slot);
    return exec::scalar(it->second);
  }
  void set_groups(Communicator* tensor, Communicator* data) override {
    exec_->set_groups(tensor, data);
    data_ = data;
  }
  void forward(int slot, const RunIds& ids) override {
    exec_->run_forward(slot, ids.seed, ids.stream, ids.batch_offset, ids.training);
  }

  void backward(int slot, const RunIds& ids, int k, int M, const std::function<void(size_t)>* ready) override {
    if (policy_.reduces_to_owner()) {  // ZeRO-2 and 3: every micro-batch's gradients reduced to their owners as made
      BRAID_ASSERT(data_, "gradient shards without a data-parallel group");
      hook_slot_ = slot;
      hook_mb_ = k;
      exec_->set_after_node(&shard_hook_);
      exec_->run_backward(slot, ids.seed, ids.stream, ids.batch_offset);
      exec_->set_after_node(nullptr);
      return;
    }
    exec_->run_backward(slot, ids.seed, ids.stream, ids.batch_offset);
    opt_->accumulate(k, loss_scale_, slot);
    if (k == M - 1 && !opt_->accumulates() && loss_scale_ != 1) opt_->scale_grads(1.0 / loss_scale_);
    if (k != M - 1 || buckets_.empty()) return;
    // The accumulation is on the executor's stream: the bucket is final, for the all-reduce on the communicator's
    // own stream, once it is done.
    exec_->stream().synchronize();
    if (ready)
      for (size_t i = 0; i < bucket_of_.size(); ++i) (*ready)(i);
  }

  const std::vector<Tensor>& buckets() const override { return buckets_; }
  const std::vector<size_t>& bucket_of() const override { return bucket_of_; }
  void set_loss_scale(double s) override {
    loss_scale_ = s;
    if (p_.loss.valid()) exec_->set_loss_scale(s);
  }
  void set_trace(io::TraceLane* lane) override { exec_->set_trace(lane_ = lane); }
  void set_trace_micro_batch(int mb) override { exec_->set_trace_micro_batch(mb); }
  bool set_node_timing(double* node_seconds, PhaseTimes*) override {
    exec_->set_node_timing(node_seconds);  // synchronises after every node while it times
    return true;
  }
  int slots() const override { return exec_->slots(); }
  size_t arena_bytes() const override { return exec_->device_bytes(); }
  size_t workspace_bytes() const override { return exec_->plan().workspace_bytes; }

  CudaExecutor& exec() { return *exec_; }
  CudaOptimizer& opt() { return *opt_; }
  bool sharded() const { return sharded_; }  // ZeRO: the engine broadcasts its parameters after the update

 private:
  const StageProgram& p_;
  StagePolicy policy_;
  bool sharded_ = false;
  std::function<void(size_t)> shard_hook_;
  int hook_slot_ = 0, hook_mb_ = 0;
  io::TraceLane* lane_ = nullptr;
  Communicator* data_ = nullptr;
  std::unique_ptr<CudaExecutor> exec_;
  std::unique_ptr<CudaOptimizer> opt_;
  std::map<int, Tensor> fetched_;  // host copies of the values scalar() reads
  std::vector<Tensor> buckets_;
  std::vector<size_t> bucket_of_;
  double loss_scale_ = 1;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(const io::RunConfig& cfg, int gpu) : cfg_(cfg), gpu_(gpu), co_(precision_options(cfg)) {
    co_.device = gpu;
    cuda::set_device(gpu);
    arena_ = std::make_unique<cuda::DeviceArena>(gpu, 256);
    sums_ = arena_->take(4 * sizeof(double), "loss and norm");
    stream_ = std::make_unique<cuda::Stream>(gpu, 0);
  }

  void enter_thread(int, int, int) override { cuda::set_device(gpu_); }

  std::unique_ptr<Program> compile(const ProgramSpec& spec, ParamStore& store) override {
    cuda::set_device(gpu_);
    auto p = std::make_unique<CudaProgram>(cfg_, spec, store, co_);
    progs_.push_back(p.get());
    return p;
  }

  void prepare(ParamStore&, Optimizer& opt, const io::OptimizerSpec&) override { host_opt_ = &opt; }

  double grad_sum_squares() override {
    double sq = 0;
    for (CudaProgram* p : progs_) sq += p->opt().grad_sum_squares();
    return sq;
  }
  void scale_grads(double k) override {
    for (CudaProgram* p : progs_) p->opt().scale_grads(k);
  }
  void update(double lr) override {
    for (CudaProgram* p : progs_) p->opt().step(lr);
    // ZeRO's broadcast of the updated parameters runs on the communicator's stream next: the update must be done.
    for (CudaProgram* p : progs_)
      if (p->sharded()) p->exec().stream().synchronize();
  }

  void download(bool with_optimizer) override {
    cuda::set_device(gpu_);
    for (CudaProgram* p : progs_) {
      p->exec().download_params();  // after the queued steps: same stream, and each copy synchronises
      if (with_optimizer) p->opt().download(*host_opt_);
    }
  }
  void upload(bool with_optimizer) override {
    cuda::set_device(gpu_);
    for (CudaProgram* p : progs_) {
      p->exec().upload_params();
      if (with_optimizer) p->opt().upload(*host_opt_);
    }
  }

  size_t device_bytes() const override {
    size_t bytes = 0;
    for (CudaProgram* p : progs_) bytes += p->exec().device_bytes() + p->opt().device_bytes();
    return bytes;
  }
  void synchronize() override {
    for (CudaProgram* p : progs_) p->exec().stream().synchronize();
  }

  // The executors' arenas hold activations, workspace and the parameters (and their 16-bit copies) together; the
  // device optimizer's arena its state and accumulators.
  DeviceMemory memory() const override {
    DeviceMemory m;
    for (CudaProgram* p : progs_) {
      m.arena += p->exec().device_bytes();
      m.optimizer += p->opt().device_bytes();
    }
    return m;
  }

  // NCCL reduces device memory: the sums travel through a small device buffer.
  void all_reduce_sum(Communicator& world, std::span<double> v) override {
    BRAID_ASSERT(v.size() <= 4, "all_reduce_sum of ", v.size(), " values");
    Tensor t = Tensor::view(sums_, TensorDesc{Shape{static_cast<int64_t>(v.size())}, DType::f64});
    stream_->upload(sums_, v.data(), v.size_bytes());
    stream_->synchronize();
    world.all_reduce(t, ReduceOp::Sum);
    stream_->download(v.data(), sums_, v.size_bytes());
  }

  cuda::Stream& comm_stream() { return *stream_; }

 private:
  const io::RunConfig& cfg_;
  int gpu_ = 0;
  CudaExecutorOptions co_;
  std::vector<CudaProgram*> progs_;  // owned by the engine's chunks, which outlive this device's use
  Optimizer* host_opt_ = nullptr;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* sums_ = nullptr;
  std::unique_ptr<cuda::Stream> stream_;
};

int distinct(const std::vector<int>& where) {
  std::vector<int> sorted = where;
  std::sort(sorted.begin(), sorted.end());
  return static_cast<int>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
}

class CudaBackend final : public CudaPlanning {  // its run-setup answers: backends/cuda_planning.h
 public:
  std::string name() const override { return "cuda"; }
  bool supports(const ops::OpDef& op, DType values) const override { return ops::cuda_supports(op, values); }

  void check_devices(const io::RunConfig& cfg, const std::vector<int>& where) const override {
    const SourceLoc at{cfg.path, 0, 0};
    std::string why;
    const int visible = cuda::device_count(&why);
    if (visible == 0)
      throw UserError(at, "devices " + cfg.devices + ": no CUDA device is visible (" + why + ")",
                      "run on a machine with an NVIDIA GPU and its driver, or train on cpu");
    for (int d : where)
      if (d < 0 || d >= visible)
        throw UserError(at, "devices " + cfg.devices + ": there is no CUDA device " + std::to_string(d) + "; " +
                                std::to_string(visible) + " visible (0-" + std::to_string(visible - 1) + ")");
  }

  std::unique_ptr<Device> device(const io::RunConfig& cfg, int where) override {
    return std::make_unique<CudaDevice>(cfg, where);
  }

  std::vector<std::unique_ptr<Communicator>> worlds(const WorldSpec& spec) override {
    std::vector<std::unique_ptr<Communicator>> out;
    const bool shared = distinct(spec.where) < spec.size;  // a GPU listed twice: through host memory
    if (spec.size == 1) {
      out.push_back(InProcWorld(1).communicator(0));  // one device: nothing crosses
      return out;
    }
    if (spec.host) {  // several processes: NCCL joined over the job's world, or that world through host memory
      const int gpu = spec.where.at(static_cast<size_t>(spec.local.at(0)));
      if (shared) out.push_back(host_staged(borrow(*spec.host), stream_for(gpu)));
      else out.push_back(NcclWorld::join(*spec.host, gpu)->communicator(spec.local.at(0)));
      return out;
    }
    if (shared) {
      InProcWorld host(spec.size, InProcOptions{std::chrono::milliseconds(300'000), spec.max_messages});
      for (int id : spec.local)
        out.push_back(host_staged(host.communicator(id), stream_for(spec.where.at(static_cast<size_t>(id)))));
      return out;
    }
    NcclWorld nccl(spec.where);
    for (int id : spec.local) out.push_back(nccl.communicator(id));  // each keeps the world's state alive
    return out;
  }

  bool pins_threads() const override { return false; }
  bool host_memory() const override { return false; }
  bool overlapped_comm() const override { return false; }

  double peak_flops(const std::vector<int>& where) const override {
    if (where.empty()) return 0;
    return cuda::dense_bf16_peak_flops(cuda::device_name(where[0])) * static_cast<double>(distinct(where));
  }

  std::string describe(const io::RunConfig& cfg, const std::vector<int>& where) const override {
    std::string list;
    for (int d : where) list += (list.empty() ? "" : ",") + std::to_string(d);
    std::string s = "cuda:" + list + " (" + cuda::device_name(where.empty() ? 0 : where[0]);
    if (where.size() > 1)
      s += distinct(where) < static_cast<int>(where.size()) ? "; GPUs shared: communication through host memory"
                                                             : "; NCCL";
    s += ")";
    return s + (cfg.train.precision == "bf16"  ? ", bf16 autocast"
                : cfg.train.precision == "f16" ? ", fp16 autocast with dynamic loss scaling"
                                               : ", fp32");
  }

  bool loss_scaling(const io::RunConfig& cfg) const override { return cfg.train.precision == "f16"; }

 private:
  // host_staged's copy streams, one per plan device of each world made, kept for the life of the process.
  cuda::Stream& stream_for(int gpu) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(std::make_unique<cuda::Stream>(gpu, 0));
    return *streams_.back();
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<cuda::Stream>> streams_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

void install_cuda_backend() {
  static std::once_flag once;
  std::call_once(once, [] { register_backend("cuda", make_cuda_backend()); });
}

}  // namespace braid::exec
