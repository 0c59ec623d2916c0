// Runs one graph on one CUDA device, as the CPU backend's exec::Executor does on a CPU (both derive from
// exec::NodeLoop; the CUDA backend's programs hold it): the same MemoryPlan (values at its offsets in one
// device arena), the same node loop (each op's CUDA kernel from backends/cuda/kernels/kernels.h; comm_* nodes through
// the Communicator of set_groups, which must take device tensors: NcclCommunicator), the same RNG keys.
// Device memory: one DeviceArena per executor, sized at construction (activations, slots, parameters and
// buffers, the largest CUDA workspace); nothing is allocated inside run(). Parameters and buffers are
// uploaded from the ParamStore at construction (upload_params) and written back by download_params.
// Host side: input() is a host staging tensor copied to the device at the start of run(); value() of a
// `keep` value is its host mirror, copied back at the end of run() (options.mirror_keep); device_value() is
// the device view. An op without a CUDA kernel is an error at construction naming it, never a CPU fallback.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm/comm.h"
#include "backends/cpu/executor.h"
#include "exec/memory_plan.h"
#include "exec/node_loop.h"
#include "exec/param_store.h"
#include "graph/ir.h"
#include "io/trace.h"
#include "backends/cuda/kernels/runtime.h"

namespace braid::exec {

struct CudaExecutorOptions {
  int device = 0;
  bool mirror_keep = true;  // copy every `keep` value to host after run() (off: fetch() what is needed)
  // bf16 autocast over fp32 storage (run file `precision: bf16`): every GEMM (linear forward/backward,
  // attention's score and context products, conv2d's im2col GEMMs) casts its operands to bf16 and runs on
  // tensor cores with fp32 accumulation and fp32 results; values, parameters (master weights), gradients,
  // norms, softmax, losses and reductions stay fp32. See cuda::Ctx::autocast.
  bool bf16 = false;
  // fp16 autocast (run file `precision: f16`): the same with fp16 operands (cuda::Ctx::autocast_type). fp16's
  // range ends at 65504 and its subnormals at 6e-8, so the trainer pairs it with dynamic loss scaling
  // (set_loss_scale, exec/loss_scale.h). Not with bf16.
  bool f16 = false;
  bool autocast() const { return bf16 || f16; }
};

class CudaExecutor : public NodeLoop {
 public:
  CudaExecutor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep,
               const ExecutorOptions& options = {}, const CudaExecutorOptions& cuda = {});
  ~CudaExecutor();
  const Tensor& input(const std::string& name, int slot = 0) const;
  const Tensor& value(ValueId v, int slot = 0) const;
  const Tensor& device_value(ValueId v, int slot = 0) const { return views_.at(static_cast<size_t>(slot)).at(v.idx()); }
  // Copies one value (any, kept or not while it is live) to host memory `out` (same desc).
  void fetch(ValueId v, const Tensor& out, int slot = 0) const;
  // Inputs written on the device by the caller (a pipeline stage's received activations and gradients): the
  // runs do not copy their host staging tensors over them.
  void set_device_fed(const std::vector<ValueId>& inputs);
  // Per-node timing (NodeLoop::set_node_timing) synchronises the stream after every node (so that each node's
  // time is its own).

  // Parameters and buffers: host ParamStore -> device, and back (values only; gradients are graph values).
  void upload_params();
  void download_params();
  // The device view of parameter or buffer `name` ("h.0.fc.weight").
  const Tensor& device_param(const std::string& name) const;
  // Under autocast: the 16-bit copy (bf16 or fp16) of device parameter data `p` (Ctx::shadows), or null. Whoever
  // writes device parameters other than upload_params() and the device optimizer (which rewrites the copies in
  // its fused update) calls params_changed(), and the copies are cast again at the start of the next run.
  void* autocast_shadow(const void* p) const;
  DType autocast_type() const { return cuda_.f16 ? DType::f16 : DType::bf16; }
  // Loss scaling: the loss's gradient seed (the ones_like node autodiff emits for the loss) is `s` instead of 1,
  // so every gradient of a run is s times the loss's (exec/loss_scale.h). 1: none. Needs a graph with backward.
  void set_loss_scale(double s);
  void params_changed() { shadows_fresh_ = false; }
  cuda::Stream& stream() { return *stream_; }
  cuda::DeviceArena& arena() { return *arena_; }
  size_t device_bytes() const { return arena_->used(); }

 private:
  void begin_range(int slot, bool training, uint64_t run_key, int64_t batch_offset) override;
  void run_node(size_t i, int slot) override;
  bool run_pair(size_t i, int slot) override;  // a linear + gelu pair (find_gelu_epilogues)
  void after_node(size_t i, int slot) override;
  void begin_run(int slot) override { stage_inputs(slot); }
  void end_phase() override;
  void end_run(int slot) override { finish_run(slot); }
  void ready_for_comm() override;
  void copy_value(const Tensor& dst, const Tensor& src) override;
  void zero_value(const Tensor& dst) override;
  void copy_part(const Tensor& x, const Tensor& y, int axis, int index, int parts) override;
  void stage_inputs(int slot);
  void finish_run(int slot);
  void refresh_shadows();
  static bool activation_copies_allowed();
  static bool gelu_epilogue_allowed();  // BRAID_GELU_EPILOGUE=0 turns the fused linear + gelu off
 public:
  // How many linear + gelu pairs ran as one cuBLASLt call (find_gelu_epilogues) since construction.
  int64_t gelu_epilogue_runs() const { return gelu_epilogue_runs_; }

 private:
  void find_gelu_epilogues();

  ParamStore& params_;
  CudaExecutorOptions cuda_;
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* autocast_ = nullptr;  // 16-bit operand scratch (cuda_.autocast())
  size_t autocast_bytes_ = 0;
  std::vector<const void*> kernels_;                                  // per node: const ops::CudaKernel*
  cuda::Ctx ctx_;                     // the current range's (begin_range)
  uint64_t run_key_ = 0;
  int64_t batch_offset_ = 0;
  int64_t gelu_epilogue_runs_ = 0;
  std::vector<std::vector<Tensor>> staging_;                          // [slot][value]: host inputs
  std::vector<bool> device_fed_;                                      // [value]: set_device_fed
  std::vector<std::vector<Tensor>> mirror_;                           // [slot][value]: host copies of keep
  std::vector<ValueId> keep_;
  std::vector<std::pair<size_t, Tensor>> param_views_;                // (store index, device view)
  std::vector<cuda::Bf16Shadow> shadows_;                             // 16-bit parameter copies, by src
  // Under autocast, 16-bit copies of activations that two or more GEMMs read whole (a linear's input, read again by
  // its weight gradient; the gradient dy that linear_dx and linear_dw both read): cast once, right after the node
  // that produces them, instead of at every GEMM. Per slot: lookup_ holds the parameters' copies and these, sorted
  // by src, for the GEMMs (Ctx::shadows); an activation's entry is valid (n > 0) from its cast until a node writes
  // any of its bytes again (the memory plan gives dead values' bytes to others) or the next run starts.
  std::vector<std::vector<cuda::Bf16Shadow>> lookup_;               // [slot]
  std::vector<std::vector<int64_t>> act_n_;                         // [slot][lookup index]: elements (0: a parameter)
  std::vector<std::vector<std::vector<size_t>>> cast_after_, drop_after_;  // [slot][node]: lookup indices
  bool act_shadows_ = false;
  size_t loss_seed_ = SIZE_MAX;  // the node seeding the loss's gradient (ones_like of the loss), if any
  double loss_scale_ = 1;
  bool shadows_fresh_ = false;
};

// Device version of copy_chunk (executor.h): chunk `index` of `parts` along `axis`, through 2-D copies.
void device_copy_chunk(const cuda::Ctx& c, const Tensor& in, const Tensor& out, int axis, int index, int parts,
                       bool scatter = false);

}  // namespace braid::exec
