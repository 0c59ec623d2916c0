// Pipeline schedules as data: GPipe, 1F1B and interleaved 1F1B are pure generators of per-device
// instruction lists, and check_schedule() proves a list free of deadlock (blocking point-to-point
// semantics) and reports its activation-memory bound and unit-time makespan before anything runs.
// Invariant: virtual stage v lives on device v % devices (Megatron's interleaved layout; for GPipe and
// 1F1B stages == devices). Nothing here runs kernels or knows about layers; lowering attaches those.
#pragma once
#include <string>
#include <vector>

namespace braid::exec {

enum class InstrKind {
  Forward,         // forward of (stage, micro_batch)
  Backward,        // backward of (stage, micro_batch)
  SendActivation,  // output of `stage` to stage + 1 on peer_device
  RecvActivation,  // input of `stage` from stage - 1 on peer_device
  SendGrad,        // gradient of the input of `stage` to stage - 1 on peer_device
  RecvGrad,        // gradient of the output of `stage` from stage + 1 on peer_device
  AllReduceGrads,  // data-parallel gradient sync of the parameters of `stage` (may be bucketed later)
  OptimizerStep,   // optimizer update of the parameters of `stage`
};

// `stage` always names the stage on *this* device that the instruction belongs to; a send of stage s
// matches the recv of stage s + 1 (activations) or s - 1 (gradients). micro_batch and peer_device are -1
// where they do not apply (AllReduceGrads, OptimizerStep; peer also for Forward, Backward).
struct Instr {
  InstrKind kind;
  int stage = 0;  // virtual stage (model chunk) index, global
  int micro_batch = -1;
  int peer_device = -1;
  bool operator==(const Instr&) const = default;
};

struct Schedule {
  std::string name;
  int devices = 0;
  int stages = 0;  // virtual stages in total
  int micro_batches = 0;
  std::vector<std::vector<Instr>> per_device;
};

inline int device_of_stage(const Schedule& s, int stage) { return stage % s.devices; }

// Unit costs used for the makespan and for placing communication: F = 1, B = 2 per (virtual) stage;
// communication, AllReduceGrads and OptimizerStep take no time.
constexpr int kForwardTime = 1;
constexpr int kBackwardTime = 2;

// All forwards, then all backwards (in micro-batch order, as PyTorch's ScheduleGPipe).
Schedule gpipe(int devices, int micro_batches);
// PipeDream-flush / Megatron's non-interleaved schedule: on device d, min(D - d - 1, M) warmup forwards,
// then one forward one backward, then the remaining backwards.
Schedule one_f_one_b(int devices, int micro_batches);
// Megatron-LM's interleaved 1F1B: each device holds chunks_per_device model chunks (stages d, d + D, ...).
// Throws UserError unless micro_batches % devices == 0.
Schedule interleaved_1f1b(int devices, int chunks_per_device, int micro_batches);

struct ScheduleCheck {
  bool ok = false;
  std::string message;              // "ok", or every problem found, naming device and instruction
  std::vector<int> peak_in_flight;  // per device: most forwards whose backward has not yet run
  int makespan = 0;                 // unit-time steps (F = 1, B = 2, communication 0) under the simulation
  std::vector<int> busy;            // per device: time spent in Forward and Backward
  double bubble_fraction = 0;       // 1 - sum(busy) / (devices * makespan)
};

// Simulates every device's list with blocking point-to-point semantics: with channel_capacity == 0 a
// send completes only when its matching recv is posted (rendezvous); with capacity c > 0 each directed
// channel (device a -> device b) buffers up to c messages. A channel is FIFO: its k-th send must match its
// k-th recv. Checks that every (stage, mb) forward and backward runs exactly once on the stage's device,
// after its input (local or received) and, for backward, after its forward; that sends follow what they
// send; that AllReduceGrads(s) follows every Backward(s, *) and OptimizerStep(s) follows it; and that every
// instruction eventually runs (on deadlock: which device is stuck at which instruction, waiting for what).
ScheduleCheck check_schedule(const Schedule& schedule, int channel_capacity = 0);

// Per stage: the most micro-batches its device holds at once (its executor's slots). A micro-batch takes a slot
// at its first instruction (the activation's receive, or the forward) and gives it back after its last (the
// gradient's send, or the backward on the first stage), as the plan runners do.
std::vector<int> stage_slots(const Schedule& schedule);

// The slots of one stage's executor during a step: a micro-batch takes one at its first instruction (take) and
// gives it back after its last (release), as stage_slots counts them.
class SlotBook {
 public:
  void reset(int stage, int slots, int micro_batches);
  int take(int mb);  // the micro-batch's slot, taken at its first call
  void release(int mb);

 private:
  int stage_ = 0;
  std::vector<int> free_, slot_of_;
};

// The textbook bubble fraction (D - 1) / (v * M + D - 1), v = stages / devices (v = 1: GPipe and 1F1B).
double analytic_bubble_fraction(int devices, int chunks_per_device, int micro_batches);

// One row per device, e.g. "d0: F0.0 Sa0.0>1 F0.1 ..." (Fs.m / Bs.m compute; Sa / Ra activation send /
// recv, Sg / Rg gradient send / recv, ">p" to and "<p" from device p; AR s all-reduce, OPT s step).
// show_comm = false prints only compute, AllReduceGrads and OptimizerStep.
std::string to_text(const Schedule& schedule, bool show_comm = true);
std::string to_string(InstrKind kind);
std::string to_string(const Instr& instr);  // "SendActivation(stage 0, mb 1, to device 1)"

}  // namespace braid::exec
