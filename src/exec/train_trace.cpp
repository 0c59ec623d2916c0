// The training run's trace (train_parts.h, TrainTrace): its lanes, memory counters, and the one file of a job of
// several processes. Each rank writes its part (`path`.rankN.json, atomically) and sends its text to rank 0, which
// writes the parts it does not see (ranks on other hosts), merges them into `path` on the job's reference clock
// (io::merge_into) and removes them; then every rank removes its own. Any failure (a rank gone, a write refused)
// throws before anything is removed: the parts stay for inspection and `path` is never half-written.
#include <cstring>
#include <exception>
#include <filesystem>

#include "exec/train_parts.h"

namespace braid::exec {
namespace {

std::string trace_part_path(const std::string& path, int rank) { return path + ".rank" + std::to_string(rank) + ".json"; }

void write_merged_trace(const io::TraceRecorder& tracer, const std::string& path, Communicator& world) {
  constexpr int kTraceTag = 0x7ff00000;  // above every pipeline tag (exec/lower.h boundary_tag)
  const int rank = world.rank(), n = world.size();
  std::string text = tracer.json();
  io::write_trace_file(trace_part_path(path, rank), text);
  Tensor len = Tensor::empty(TensorDesc{Shape{1}, DType::i64});
  if (rank != 0) {
    len.data<int64_t>()[0] = static_cast<int64_t>(text.size());
    world.send(len, 0, kTraceTag);
    Tensor bytes = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(text.size() + 3) / 4}, DType::i32});
    std::memcpy(bytes.raw(), text.data(), text.size());
    world.send(bytes, 0, kTraceTag);
  } else {
    std::vector<std::string> parts{trace_part_path(path, 0)};
    for (int r = 1; r < n; ++r) {
      world.recv(len, r, kTraceTag);
      const auto size = static_cast<size_t>(len.data<int64_t>()[0]);
      Tensor bytes = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(size + 3) / 4}, DType::i32});
      world.recv(bytes, r, kTraceTag);
      parts.push_back(trace_part_path(path, r));
      io::write_trace_file(parts.back(), std::string(static_cast<const char*>(bytes.raw()), size));
    }
    io::merge_into(parts, path);
    for (const auto& p : parts) std::filesystem::remove(p);
  }
  world.barrier();  // the merge succeeded: every rank drops its own part (on another host's disk)
  std::error_code ec;
  std::filesystem::remove(trace_part_path(path, rank), ec);
}

}  // namespace

TrainTrace::TrainTrace(const TrainOptions& opts, Engine& engine) : opts_(opts) {
  if (!opts.trace.empty()) {
    const bool multi = opts.world != nullptr;
    const std::string kind = engine.backend().name();
    const int n = engine.devices();
    const bool comm_lanes = engine.plan().summary.data_parallel > 1;
    io::TraceOptions topts;
    std::vector<io::TraceLaneSpec> lanes;
    std::vector<int> traced;  // this process's devices
    if (multi) {  // this process's device only: pid = rank, lanes keep their device ids
      topts.rank = opts.rank;
      topts.process_name = "rank " + std::to_string(opts.rank) + (opts.trace_host.empty() ? "" : " (" + opts.trace_host + ")");
      topts.clock_offset_ns = opts.trace_clock_offset_ns;
      lanes.push_back({opts.rank, "device " + std::to_string(opts.rank) + " (" + kind + ")"});
      traced.push_back(opts.rank);
    } else {
      lanes = io::device_lanes(n, kind);
      for (int d = 0; d < n; ++d) traced.push_back(d);
    }
    if (comm_lanes)
      for (int d : traced) lanes.push_back({n + d, "device " + std::to_string(d) + " all-reduce"});
    tracer_ = std::make_unique<io::TraceRecorder>(lanes, topts);
    for (int d : traced) engine.set_trace(d, &tracer_->lane(d), comm_lanes ? &tracer_->lane(n + d) : nullptr);
    lane0_ = &tracer_->lane(traced.front());
  }
  uncaught_ = std::uncaught_exceptions();
}

TrainTrace::~TrainTrace() {
  // A job that fails (a lost rank, a refused write, an error on any rank) leaves each surviving rank's part, its
  // events up to the failure, for inspection; the merged file is written only by a job that ends well.
  if (!tracer_ || !opts_.world || std::uncaught_exceptions() <= uncaught_) return;
  try {
    tracer_->write(trace_part_path(opts_.trace, opts_.rank));
  } catch (...) {  // already failing: the first error is the one to report
  }
}

void TrainTrace::count_memory(const MemoryReport& m) {
  if (!tracer_) return;
  auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  for (size_t i = 0; i < m.memory.size(); ++i)
    tracer_->add_counter(m.local[i], "memory device " + std::to_string(m.local[i]) + " (MiB)",
                         {{"arena", mib(m.memory[i].arena)},
                          {"parameters", mib(m.memory[i].parameters)},
                          {"gradients", mib(m.memory[i].gradients)},
                          {"optimizer", mib(m.memory[i].optimizer)}});
}

void TrainTrace::write(FILE* out, bool rank0) {
  if (!tracer_) return;
  if (opts_.world) write_merged_trace(*tracer_, opts_.trace, *opts_.world);
  else tracer_->write(opts_.trace);
  if (rank0) std::fprintf(out, "braid: trace written to %s (open it in ui.perfetto.dev)\n", opts_.trace.c_str());
}

}  // namespace braid::exec
