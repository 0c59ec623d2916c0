// The CUDA plan engine (cuda_plan_engine.h): exec/pipeline.cpp's schedule interpreter over CudaExecutor.
#include "exec/cuda/cuda_plan_engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "exec/comm/inproc.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/cuda_optimizer.h"
#include "exec/cuda/device_eval.h"
#include "exec/cuda/nccl_comm.h"
#include "exec/cuda/staged_comm.h"
#include "exec/loss_scale.h"
#include "exec/lower.h"
#include "exec/pipeline.h"
#include "exec/runner.h"
#include "exec/schedule.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "ops/cuda/device_info.h"
#include "ops/cuda/runtime.h"

namespace braid::exec {
namespace {

class CudaPlanEngine final : public DeviceEngine {
 public:
  explicit CudaPlanEngine(const DeviceEngineArgs& a)
      : cfg_(a.cfg),
        store_(a.store),
        plan_(*a.plan),
        programs_(lower_plan(a.cfg.model, *a.plan, LowerOptions{a.cfg.parallel.sync_batch_norm})),
        schedule_(schedule_of(a.plan->summary)),
        dp_(a.plan->summary.data_parallel),
        micro_batches_(static_cast<int>(a.plan->summary.micro_batches)),
        micro_(a.plan->summary.micro_batch) {
    const SourceLoc at{cfg_.path, 0, 0};
    const ScheduleCheck check = check_schedule(schedule_);
    BRAID_ASSERT(check.ok, "the ", schedule_.name, " schedule does not check: ", check.message);
    std::string why;
    const int visible = cuda::device_count(&why);
    if (visible == 0)
      throw UserError(at, "devices " + cfg_.devices + ": no CUDA device is visible (" + why + ")",
                      "run on a machine with an NVIDIA GPU and its driver, or train on cpu");
    const int n = plan_.summary.devices;
    if (static_cast<int>(a.devices.size()) < n)
      throw UserError(at, "the plan uses " + std::to_string(n) + " devices but devices " + cfg_.devices + " lists " +
                              std::to_string(a.devices.size()),
                      "list one GPU per device of the plan (a GPU may be listed more than once)");
    for (int id = 0; id < n; ++id)
      if (a.devices[static_cast<size_t>(id)] >= visible)
        throw UserError(at, "devices " + cfg_.devices + ": there is no CUDA device " +
                                std::to_string(a.devices[static_cast<size_t>(id)]) + "; " + std::to_string(visible) +
                                " visible (0-" + std::to_string(visible - 1) + ")");
    copts_.bf16 = cfg_.train.precision == "bf16";
    copts_.f16 = cfg_.train.precision == "f16";
    copts_.mirror_keep = false;
    const std::vector<int> slots = stage_slots(schedule_);
    // In one process every plan device is here; in a job of several (a.world), this process's rank only.
    host_ = a.world;
    local_index_.assign(static_cast<size_t>(n), -1);
    for (int id = 0; id < n; ++id) {
      if (host_ && id != a.rank) continue;
      local_index_[static_cast<size_t>(id)] = static_cast<int>(devices_.size());
      devices_.push_back(std::make_unique<Device>());
      devices_.back()->id = id;
      devices_.back()->gpu = a.devices[static_cast<size_t>(id)];
    }
    for (const StageProgram& p : programs_)
      for (size_t k = 0; k < p.devices.size(); ++k) {
        if (!local_of(p.devices[k])) continue;
        Device& d = *local_of(p.devices[k]);
        d.position = p.stage % plan_.summary.pipeline_stages;
        Chunk c;
        c.prog = &p;
        c.replica = static_cast<int>(k) / p.tp;
        c.tensor_rank = static_cast<int>(k) % p.tp;
        add_stage_params(p, c.tensor_rank, cfg_.train.seed, d.store);  // whole from the seed, then sliced
        d.chunks.push_back(std::move(c));
      }
    // Executors and optimizers once every chunk of a device is in its store (the executors upload from it).
    for (auto& dp : devices_) {
      Device& d = *dp;
      BRAID_ASSERT(!d.chunks.empty(), "device ", d.id, " holds no stage");
      cuda::set_device(d.gpu);
      for (auto& c : d.chunks) {
        const StageProgram& p = *c.prog;
        ExecutorOptions eo;
        eo.slots = slots[static_cast<size_t>(p.stage)];
        eo.stash = p.stash;
        CudaExecutorOptions co = copts_;
        co.device = d.gpu;
        try {
          c.exec = std::make_unique<CudaExecutor>(p.g, d.store, p.keep, eo, co);
          // Data-parallel stages: accumulators even for one micro-batch, one block to all-reduce.
          c.opt = std::make_unique<CudaOptimizer>(*c.exec, cfg_.optimizer, micro_batches_, p.dp > 1);
        } catch (const cuda::DeviceOutOfMemory& e) {
          throw UserError(at, std::string(e.what()) + ": stage " + std::to_string(p.stage) + " on device " +
                                  std::to_string(d.id) + " (cuda:" + std::to_string(d.gpu) + ") does not fit",
                          "a plan with more pipeline stages or tensor parallelism, or a smaller micro_batch");
        }
        // Received activations and gradients arrive in device memory: the forward must not stage over them.
        std::vector<ValueId> fed = p.recv_values;
        fed.insert(fed.end(), p.send_grads.begin(), p.send_grads.end());
        c.exec->set_device_fed(fed);
        // A gradient counts once in the global norm: replica 0's, tensor rank 0's unless it is a slice.
        c.opt->set_norm_params([&](const std::string& name) {
          const ParamShard& sh = shard_of(p, name);
          return c.replica == 0 && !sh.buffer && shard_counts(sh, c.tensor_rank);
        });
        c.model_inputs = stage_model_inputs(p, cfg_.model, eo.slots, micro_,
                                            [&](const std::string& name, int slot) { return c.exec->input(name, slot); });
        c.num_model_inputs = cfg_.model.inputs.size();
        if (p.loss.valid()) c.loss = Tensor::empty(p.g.value(p.loss).desc);
      }
      d.opt = std::make_unique<Optimizer>(cfg_.optimizer, d.store);
      d.comm_stream = std::make_unique<cuda::Stream>(d.gpu, 0);
      d.arena = std::make_unique<cuda::DeviceArena>(d.gpu, 256);
      d.sums = Tensor::view(d.arena->take(2 * sizeof(double), "loss and norm"), TensorDesc{Shape{2}, DType::f64});
    }
    std::vector<int> gpus(a.devices.begin(), a.devices.begin() + n);  // every plan device's, local or not
    std::vector<int> sorted = gpus;
    std::sort(sorted.begin(), sorted.end());
    distinct_ = static_cast<int>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    if (host_) {  // several processes: NCCL joined over the job's world, or that world itself through host memory
      Device& d = *devices_[0];
      if (distinct_ < n) {
        d.world = host_staged(borrow(*host_), *d.comm_stream);
      } else {
        nccl_ = NcclWorld::join(*host_, d.gpu);
        d.world = nccl_->communicator(d.id);
      }
    } else if (distinct_ < n) {
      host_world_ = std::make_unique<InProcWorld>(n, InProcOptions{std::chrono::milliseconds(300'000), micro_batches_ + 1});
      for (auto& d : devices_) d->world = host_staged(host_world_->communicator(d->id), *d->comm_stream);
    } else {
      nccl_ = std::make_unique<NcclWorld>(gpus);
      for (auto& d : devices_) d->world = nccl_->communicator(d->id);
    }
    name_ = cuda::device_name(devices_[0]->gpu);
    CudaExecutorOptions eo = copts_;
    eo.device = devices_[0]->gpu;
    eval_ = std::make_unique<DeviceEvaluator>(cfg_, store_, eo, /*plan=*/true);
    cuda::set_device(devices_[0]->gpu);
  }

  double step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip,
              double* grad_norm) override {
    BRAID_ASSERT(static_cast<int64_t>(batch_idx.size()) == micro_ * dp_ * micro_batches_, "a step of ",
                 batch_idx.size(), " samples for a plan of ", micro_batches_, " x ", dp_, " x ", micro_);
    const Job job{&data, batch_idx, step, lr, clip, copts_.f16 ? scaler_.scale() : 1.0};
    std::vector<std::exception_ptr> errors(devices_.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < devices_.size(); ++i)
      threads.emplace_back([&, i] {
        Device& d = *devices_[i];
        try {
          run_step(d, job);
        } catch (...) {
          errors[i] = std::current_exception();
          d.world->abort("device " + std::to_string(d.id) + " failed");  // its peers stop waiting for it
        }
      });
    for (auto& t : threads) t.join();
    cuda::set_device(devices_[0]->gpu);
    for (auto& e : errors)  // the first device's error is the cause more often than its peers' aborts
      if (e) std::rethrow_exception(e);
    const Device& d0 = *devices_[0];
    const double norm = std::sqrt(d0.sq);
    *grad_norm = clip > 0 ? norm : -1;
    if (copts_.f16 && !scaler_.update(std::isfinite(d0.sq))) ++skipped_;  // the devices skipped their update
    return d0.loss;
  }

  void to_host(ParamStore& full, Optimizer* full_opt) override {
    for (auto& d : devices_) {
      cuda::set_device(d->gpu);
      for (auto& c : d->chunks) {
        c.exec->download_params();
        if (full_opt) c.opt->download(*d->opt);
      }
    }
    cuda::set_device(devices_[0]->gpu);
    // Every shard that counts into the whole tensors, in plan device 0's process; shards of other processes
    // arrive over the job's world.
    gather_shards(
        programs_,
        [&](int id) {
          Device* d = local_of(id);
          return d ? ShardHolder{&d->store, d->opt.get()} : ShardHolder{};
        },
        host_, full, full_opt);
    const bool root = local_of(0) != nullptr;
    if (full_opt && root) {
      full_opt->set_steps_taken(devices_[0]->chunks[0].opt->steps_taken());
      full_opt->loss_scale = copts_.f16 ? scaler_.state() : LossScaleState{};
    }
  }

  void from_host(const ParamStore& full, const Optimizer* full_opt) override {
    for (auto& d : devices_) {
      for (auto& c : d->chunks) scatter_stage(*c.prog, c.tensor_rank, full, full_opt, d->store, d->opt.get());
      if (full_opt) d->opt->set_steps_taken(full_opt->steps_taken());
      cuda::set_device(d->gpu);
      for (auto& c : d->chunks) {
        c.exec->upload_params();
        if (full_opt) c.opt->upload(*d->opt);
      }
    }
    cuda::set_device(devices_[0]->gpu);
    if (full_opt) scaler_ = LossScaler(full_opt->loss_scale);
    eval_->invalidate();
  }

  // The whole evaluation graph on device 0's GPU, its parameters gathered through the host store.
  std::vector<std::pair<std::string, double>> evaluate(io::Dataset& data, std::span<const int64_t> idx) override {
    // In a job of several processes the trainer has gathered on every rank before plan device 0's evaluates
    // (to_host is a collective): the store is current.
    return eval_->run(data, idx, devices_[0]->chunks[0].opt->steps_taken(), [&] {
      if (!host_) to_host(store_, nullptr);
    });
  }

  bool any(bool flag) override {
    if (!host_) return flag;
    Tensor t = Tensor::empty(TensorDesc{Shape{1}, DType::f64});
    t.data<double>()[0] = flag ? 1.0 : 0.0;
    host_->all_reduce(t, ReduceOp::Max);  // the job's world, idle between steps
    return t.data<double>()[0] > 0;
  }

  void set_trace(io::TraceLane* lane) override {
    for (auto& c : devices_[0]->chunks) c.exec->set_trace(lane);  // device 0's stages
  }

  void synchronize() override {
    for (auto& d : devices_)
      for (auto& c : d->chunks) c.exec->stream().synchronize();
  }

  bool set_node_timing(double*) override { return false; }  // braid time: one device's graph (no plan)

  double peak_flops() const override { return cuda::dense_bf16_peak_flops(name_) * static_cast<double>(distinct_); }

  std::string describe() const override {
    const planner::Summary& s = plan_.summary;
    std::string list;
    for (const auto& d : devices_) list += (list.empty() ? "" : ",") + std::to_string(d->gpu);
    char buf[256];
    std::snprintf(buf, sizeof buf, "plan dp %d x tp %d x pp %d, %s, %lld micro-batches of %lld", s.data_parallel,
                  s.tensor_parallel, s.pipeline_stages, s.schedule.c_str(), static_cast<long long>(s.micro_batches),
                  static_cast<long long>(s.micro_batch));
    return "cuda:" + list + " (" + name_ + "; " + buf +
           (distinct_ < static_cast<int>(devices_.size()) ? "; GPUs shared: communication through host memory"
                                                           : "; NCCL") +
           ")" + (copts_.bf16 ? ", bf16 autocast" : copts_.f16 ? ", fp16 autocast with dynamic loss scaling" : ", fp32");
  }

  std::vector<std::pair<std::string, double>> step_metrics() const override {
    if (!copts_.f16) return {};
    return {{"loss_scale", scaler_.scale()}, {"skipped_steps", static_cast<double>(skipped_)}};
  }

  // The most any device holds (its stages' arenas and optimizer state).
  size_t device_bytes() const override {
    size_t most = 0;
    for (const auto& d : devices_) {
      size_t bytes = 0;
      for (const auto& c : d->chunks) bytes += c.exec->device_bytes() + c.opt->device_bytes();
      most = std::max(most, bytes);
    }
    return most;
  }

 private:
  struct Chunk {  // one stage program on one device
    const StageProgram* prog = nullptr;
    int replica = 0, tensor_rank = 0;
    std::unique_ptr<CudaExecutor> exec;
    std::unique_ptr<CudaOptimizer> opt;
    std::unique_ptr<Communicator> tensor_comm, data_comm;
    SlotBook slots;  // the executor's slots by micro-batch, this step
    std::vector<Tensor> model_inputs;  // [slot][model input]: the executor's host staging tensors, or scratch
    size_t num_model_inputs = 0;
    int backwards = 0;  // this step's
    Tensor loss;        // host copy (loss stage)
  };
  struct Device {
    int id = 0, gpu = 0, position = 0;
    std::vector<Chunk> chunks;  // stage order
    ParamStore store;           // host copies of this device's shards
    std::unique_ptr<Optimizer> opt;  // host copy of their optimizer state (checkpoints)
    std::unique_ptr<cuda::Stream> comm_stream;
    std::unique_ptr<cuda::DeviceArena> arena;
    Tensor sums;  // device f64[2]: the loss and squared gradient norm, summed over the world
    std::unique_ptr<Communicator> world;
    std::vector<int64_t> scratch;
    bool groups = false;
    double loss = 0, sq = 0;  // the last step's, over the world
  };
  struct Job {
    io::Dataset* data = nullptr;
    std::span<const int64_t> batch_idx;
    int64_t step = 0;
    double lr = 0, clip = 0, loss_scale = 1;
  };


  Device* local_of(int id) const {
    const int i = local_index_.at(static_cast<size_t>(id));
    return i < 0 ? nullptr : devices_[static_cast<size_t>(i)].get();
  }

  int device_at(int stage, int replica, int tensor_rank) const {
    return stage_device(programs_.at(static_cast<size_t>(stage)), replica, tensor_rank);
  }

  Chunk& chunk_of(Device& d, int stage) {
    for (auto& c : d.chunks)
      if (c.prog->stage == stage) return c;
    BRAID_ASSERT(false, "device ", d.id, " holds no chunk of stage ", stage);
    return d.chunks.front();
  }

  // Groups on the device's first step: split() is a collective of the listed devices, so each device makes its
  // own, in stage order (every member of a group meets it at the same point of its sequence).
  void make_groups(Device& d) {
    for (auto& c : d.chunks) {
      const StageProgram& p = *c.prog;
      if (p.tp > 1) c.tensor_comm = d.world->split(tensor_group(p, c.replica));
      if (p.dp > 1) c.data_comm = d.world->split(data_group(p, c.tensor_rank));
      c.exec->set_groups(c.tensor_comm.get(), c.data_comm.get());
    }
    d.groups = true;
  }

  void run_step(Device& d, const Job& job) {
    cuda::set_device(d.gpu);
    if (!d.groups) make_groups(d);
    const int M = micro_batches_;
    const int64_t micro_global = micro_ * dp_;
    for (auto& c : d.chunks) {
      c.backwards = 0;
      c.slots.reset(c.prog->stage, c.exec->slots(), M);
      if (copts_.f16 && c.prog->loss.valid()) c.exec->set_loss_scale(job.loss_scale);
    }
    double loss_sum = 0;
    for (const Instr& in : schedule_.per_device[static_cast<size_t>(d.position)]) {
      Chunk& c = chunk_of(d, in.stage);
      const StageProgram& p = *c.prog;
      const int mb = in.micro_batch;
      const uint64_t stream = static_cast<uint64_t>(job.step * M + mb);
      const int64_t offset = c.replica * micro_;
      switch (in.kind) {
        case InstrKind::Forward: {
          const int slot = c.slots.take(mb);
          if (!p.model_inputs.empty()) {
            auto begin = job.batch_idx.begin() + mb * micro_global + offset;
            d.scratch.assign(begin, begin + micro_);
            std::span<Tensor> views(c.model_inputs.data() + static_cast<size_t>(slot) * c.num_model_inputs,
                                    c.num_model_inputs);
            job.data->read(d.scratch, views);  // thread-safe (io::Dataset::read)
          }
          c.exec->set_trace_micro_batch(mb);
          c.exec->run_forward(slot, cfg_.train.seed, stream, offset);
          if (p.loss.valid() && c.tensor_rank == 0) {
            c.exec->fetch(p.loss, c.loss, slot);
            loss_sum += scalar(c.loss) / static_cast<double>(M * dp_);
          }
          break;
        }
        case InstrKind::Backward: {
          const int slot = c.slots.take(mb);
          c.exec->set_trace_micro_batch(mb);
          c.exec->run_backward(slot, cfg_.train.seed, stream, offset);
          c.opt->accumulate(c.backwards, job.loss_scale, slot);
          if (++c.backwards == M && !c.opt->accumulates() && job.loss_scale != 1) c.opt->scale_grads(1.0 / job.loss_scale);
          if (p.stage == 0) c.slots.release(mb);  // nothing to send back: the micro-batch is done
          break;
        }
        case InstrKind::SendActivation: {
          const int slot = c.slots.take(mb);
          if (c.tensor_rank != 0) break;
          const int next_tp = programs_[static_cast<size_t>(p.stage + 1)].tp;
          for (size_t k = 0; k < p.send_values.size(); ++k)
            for (int t = 0; t < next_tp; ++t)
              d.world->send(c.exec->device_value(p.send_values[k], slot), device_at(p.stage + 1, c.replica, t),
                            boundary_tag(p.stage, k, false));
          break;
        }
        case InstrKind::RecvActivation: {
          const int slot = c.slots.take(mb);
          const int peer = device_at(p.stage - 1, c.replica, 0);
          for (size_t k = 0; k < p.recv_values.size(); ++k) {
            Tensor v = c.exec->device_value(p.recv_values[k], slot);
            d.world->recv(v, peer, boundary_tag(p.stage - 1, k, false));
          }
          break;
        }
        case InstrKind::SendGrad: {
          const int slot = c.slots.take(mb);
          if (c.tensor_rank == 0) {
            const int prev_tp = programs_[static_cast<size_t>(p.stage - 1)].tp;
            for (size_t k = 0; k < p.recv_grads.size(); ++k) {
              if (!p.recv_grads[k].valid()) continue;
              for (int t = 0; t < prev_tp; ++t)
                d.world->send(c.exec->device_value(p.recv_grads[k], slot), device_at(p.stage - 1, c.replica, t),
                              boundary_tag(p.stage - 1, k, true));
            }
          }
          c.slots.release(mb);
          break;
        }
        case InstrKind::RecvGrad: {
          const int slot = c.slots.take(mb);
          const int peer = device_at(p.stage + 1, c.replica, 0);
          for (size_t k = 0; k < p.send_grads.size(); ++k) {
            if (!p.send_grads[k].valid()) continue;
            Tensor v = c.exec->device_value(p.send_grads[k], slot);
            d.world->recv(v, peer, boundary_tag(p.stage, k, true));
          }
          break;
        }
        case InstrKind::AllReduceGrads: {
          if (p.dp <= 1) break;
          c.exec->stream().synchronize();  // the accumulation is on the executor's stream
          Tensor flat = c.opt->flat_gradients();  // every gradient of the stage, one all-reduce
          c.data_comm->all_reduce(flat, ReduceOp::Avg);
          break;
        }
        case InstrKind::OptimizerStep:
          break;  // one update of every stage after the list (clipping needs every gradient)
      }
    }
    // The loss (held by the loss stage's tensor rank 0 of each replica) and the global squared gradient norm:
    // sums over the world.
    double sq = 0;
    if (job.clip > 0 || copts_.f16)
      for (auto& c : d.chunks) sq += c.opt->grad_sum_squares();
    const double host[2] = {loss_sum, sq};
    d.comm_stream->upload(d.sums.raw(), host, sizeof host);
    d.comm_stream->synchronize();
    d.world->all_reduce(d.sums, ReduceOp::Sum);
    double sums[2];
    d.comm_stream->download(sums, d.sums.raw(), sizeof sums);
    d.loss = sums[0];
    d.sq = sums[1];
    if (copts_.f16 && !std::isfinite(d.sq)) return;  // an fp16 overflow somewhere: no device updates
    const double coef = job.clip > 0 ? clip_coefficient(std::sqrt(d.sq), job.clip) : 1.0;
    for (auto& c : d.chunks) {
      if (coef < 1.0) c.opt->scale_grads(coef);
      c.opt->step(job.lr);
    }
  }

  const io::RunConfig& cfg_;
  ParamStore& store_;  // the whole model (host): checkpoints, evaluation, initial weights
  planner::Plan plan_;
  std::vector<StageProgram> programs_;
  Schedule schedule_;
  int dp_ = 1, micro_batches_ = 1;
  int64_t micro_ = 1;
  CudaExecutorOptions copts_;
  std::vector<std::unique_ptr<Device>> devices_;  // the local plan devices, by id
  std::vector<int> local_index_;                  // per plan device id: index in devices_, -1 in another process
  Communicator* host_ = nullptr;                  // the job's world (several processes), else null
  int distinct_ = 1;
  std::unique_ptr<NcclWorld> nccl_;
  std::unique_ptr<InProcWorld> host_world_;
  std::unique_ptr<DeviceEvaluator> eval_;  // on plan device 0's GPU
  std::string name_;
  LossScaler scaler_;
  int64_t skipped_ = 0;
};

}  // namespace

std::unique_ptr<DeviceEngine> make_cuda_plan_engine(const DeviceEngineArgs& a) {
  return std::make_unique<CudaPlanEngine>(a);
}

}  // namespace braid::exec
