// Chrome traces (Trace Event Format, opened by Perfetto and chrome://tracing): one lane per device, events
// named by kind, layer range, micro-batch and peer. Recording is lock-free and allocation-free: each lane
// has one writer thread and a buffer reserved up front; a full lane drops events and counts them. A
// lane publishes an event when it ends, so write() may run while workers record (open events are left out).
// Timestamps come from one steady-clock origin per recorder. Across processes (and hosts), a recorder told
// its clock's offset to a reference clock (TraceOptions::clock_offset_ns, dist/clock_sync.h) writes where its
// origin lies on that clock, and merge_into() shifts each file's events onto it; it does not measure offsets.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace braid::io {

enum class TraceKind : uint8_t { Forward, Backward, Send, Recv, Collective, Optimizer, Data, Eval, Checkpoint };
inline constexpr int kTraceKindCount = 9;

// "forward", "backward", "send", "recv", "collective", "optimizer", "data", "eval", "checkpoint": the
// event's category ("cat") in the file.
std::string_view trace_kind_name(TraceKind kind);

// A fixed-capacity event name: formatting and storing one never allocates. Longer text is cut, ending "~".
class TraceName {
 public:
  static constexpr size_t kCapacity = 95;
  TraceName() = default;
  TraceName(std::string_view s) { append(s); }  // NOLINT: implicit, so begin() takes text or a TraceName
  TraceName(const char* s) : TraceName(std::string_view(s)) {}
  TraceName(const std::string& s) : TraceName(std::string_view(s)) {}
  TraceName& append(std::string_view s);
  std::string_view view() const { return {buf_.data(), size_}; }
  bool operator==(std::string_view s) const { return view() == s; }

 private:
  std::array<char, kCapacity + 1> buf_{};
  uint8_t size_ = 0;
};

// What an event is about; trace_name() turns it into the name every caller uses, so that names agree:
//   {Forward, first "h.0", last "h.1", mb 3}                         -> "F h.0-h.1 mb3"
//   {Backward, first "h.0", mb 3}                                    -> "B h.0 mb3"
//   {Send, what "act", mb 3, peer 1}                                 -> "send act mb3 -> dev1"
//   {Recv, what "grad", mb 3, peer 0}                                -> "recv grad mb3 <- dev0"
//   {Collective, what "all_reduce grads", bytes 12.5e6}              -> "all_reduce grads 12.5 MB"
//   {Optimizer, first "h.0", last "h.3"}                             -> "optimizer h.0-h.3"
// Order: kind word (none for collectives: `what` names the operation), what, layer range, mbN, peer, size.
struct TraceLabel {
  TraceKind kind = TraceKind::Forward;
  std::string_view first_layer{};  // the layer range; empty: none
  std::string_view last_layer{};   // empty or equal to first_layer: a single layer
  std::string_view what{};         // send / recv: "act", "grad"; collective: "all_reduce grads"; else free text
  int micro_batch = -1;          // -1: none
  int peer = -1;                 // send / recv: the other device; -1: none
  double bytes = -1;             // payload, shown as "12.5 MB" (decimal units); < 0: none
};
TraceName trace_name(const TraceLabel& label);

// A numeric event argument ("bytes", "stage"). `key` must outlive the recorder (a string literal). Takes
// any arithmetic value, so that {"bytes", size} needs no cast.
struct TraceArg {
  TraceArg() = default;
  template <typename T>
    requires std::is_arithmetic_v<T>
  TraceArg(const char* k, T v) : key(k), value(static_cast<double>(v)) {}
  const char* key = nullptr;
  double value = 0;
};
inline constexpr size_t kMaxTraceArgs = 4;

struct TraceEvent {
  int64_t start_ns = 0;  // since the recorder's origin
  int64_t end_ns = 0;
  int32_t micro_batch = -1;  // written as args.mb when >= 0
  TraceKind kind = TraceKind::Forward;
  uint8_t num_args = 0;
  std::array<TraceArg, kMaxTraceArgs> args{};
  TraceName name;
};

// One device's (or worker thread's) events. Exactly one thread records into a lane at a time; readers
// (write(), activity()) may run concurrently and see every event ended before they look.
class alignas(64) TraceLane {
 public:
  static constexpr int kMaxDepth = 16;  // begin() nesting

  TraceLane(int id, std::string name, size_t capacity);
  TraceLane(const TraceLane&) = delete;
  TraceLane& operator=(const TraceLane&) = delete;

  // Opens an event; end() closes the innermost open one. Events nest, never overlap, on one lane.
  void begin(TraceKind kind, TraceName name, int micro_batch = -1, std::initializer_list<TraceArg> args = {});
  void begin(const TraceLabel& label, std::initializer_list<TraceArg> args = {});
  void end();
  // An event timed elsewhere (microseconds on the recorder's clock, as now_us()).
  void complete(TraceKind kind, TraceName name, int micro_batch, double start_us, double end_us,
                std::initializer_list<TraceArg> args = {});

  double now_us() const;
  int id() const { return id_; }
  const std::string& name() const { return name_; }
  size_t capacity() const { return events_.size(); }
  size_t size() const { return count_.load(std::memory_order_acquire); }  // events recorded (published)
  int64_t dropped() const { return dropped_.load(std::memory_order_acquire); }
  int depth() const { return depth_; }  // events open now (the recording thread only)
  // The first size() events, in the order they ended.
  std::vector<TraceEvent> events() const;
  // When the first dropped event ended (ns since origin); meaningful when dropped() > 0.
  int64_t first_drop_ns() const { return first_drop_ns_.load(std::memory_order_relaxed); }

 private:
  friend class TraceRecorder;  // sets origin_ once every lane is allocated
  int64_t now_ns() const;
  void publish(const TraceEvent& e);

  int id_;
  std::string name_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<TraceEvent> events_;  // sized to the capacity once; slots [0, count_) are published
  std::atomic<size_t> count_{0};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> first_drop_ns_{0};
  std::array<TraceEvent, kMaxDepth> open_{};
  int depth_ = 0;
};

// RAII: begin() now, end() when the scope closes. A null lane records nothing (tracing off), and the
// TraceLabel form then does not even format the name.
class TraceScope {
 public:
  TraceScope(TraceLane* lane, TraceKind kind, TraceName name, int micro_batch = -1,
             std::initializer_list<TraceArg> args = {})
      : lane_(lane) {
    if (lane_) lane_->begin(kind, name, micro_batch, args);
  }
  TraceScope(TraceLane* lane, const TraceLabel& label, std::initializer_list<TraceArg> args = {}) : lane_(lane) {
    if (lane_) lane_->begin(label, args);
  }
  ~TraceScope() {
    if (lane_) lane_->end();
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceLane* lane_;
};

struct TraceLaneSpec {
  int id = 0;        // the tid in the file: the device index; other threads (data loader) take ids after them
  std::string name;  // shown as the lane's title, e.g. "device 0 (cpu)"
};
// {0, "device 0 (cpu)"}, {1, "device 1 (cpu)"}, ...
std::vector<TraceLaneSpec> device_lanes(int devices, std::string_view device_kind);

struct TraceOptions {
  int rank = 0;               // the pid in the file; distinct per process so that merged files keep apart
  std::string process_name{};  // "" -> "braid rank <rank>"
  size_t lane_capacity = size_t{1} << 16;  // events per lane, 192 bytes each (12 MiB), reserved up front
  // This process's steady clock + clock_offset_ns = the reference clock shared by the files to be merged
  // (the store server's). When set, json() writes otherData.clock_origin_ns: the origin on that clock.
  std::optional<int64_t> clock_offset_ns{};
};

// Per lane over a window: time covered by events of the chosen kinds (nesting counted once) and the rest.
struct LaneActivity {
  int id = 0;
  double busy_us = 0;
  double idle_fraction = 0;  // 1 - busy / window
};
struct TraceActivity {
  double window_us = 0;  // from the first start to the last end of a chosen event, over all lanes
  std::vector<LaneActivity> lanes;
};

class TraceRecorder {
 public:
  // Lanes are created here, in the order they are shown; the clock origin is the end of construction.
  explicit TraceRecorder(std::vector<TraceLaneSpec> lanes, TraceOptions options = {});

  TraceLane& lane(int id);  // internal error when no lane has that id
  const std::vector<std::unique_ptr<TraceLane>>& lanes() const { return lanes_; }
  double now_us() const;
  int rank() const { return options_.rank; }
  // Time 0 of the file as this process's steady clock (ns since its epoch).
  int64_t origin_steady_ns() const;
  const std::string& process_name() const { return options_.process_name; }
  int64_t dropped() const;  // over all lanes

  // The whole trace as Trace Event Format JSON: {"traceEvents": [M metadata, X events, an "i" marker
  // where a lane filled up], "displayTimeUnit": "ms", "otherData": {"producer", "rank", "dropped_events",
  // and with a clock offset "clock_origin_ns"}}.
  std::string json() const;
  // json() written atomically (temporary file in the same folder, fsync, rename): a failed write leaves
  // an existing file intact. Throws UserError naming the path.
  void write(const std::string& path) const;

  // A counter track written as a "C" event at time 0 (Perfetto draws it above the lanes): `name` (unique per
  // track, e.g. "memory device 0 (MiB)") with one series per value. braid train adds what each device holds.
  void add_counter(int lane_id, std::string name, std::vector<std::pair<std::string, double>> values);

  // Idle time per lane, for comparing with a schedule's bubble fraction. Default kinds: forward, backward.
  TraceActivity activity(std::initializer_list<TraceKind> kinds = {TraceKind::Forward, TraceKind::Backward}) const;

 private:
  TraceOptions options_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<std::unique_ptr<TraceLane>> lanes_;
  struct Counter {
    int lane = 0;
    std::string name;
    std::vector<std::pair<std::string, double>> values;
  };
  std::vector<Counter> counters_;
};

// Concatenates the events of per-process trace files (each one of write()'s files, or any Trace Event
// Format file) into one file, written atomically. When every file has otherData.clock_origin_ns, each
// file's "ts" values are shifted by its origin minus the earliest origin (one common clock, time 0 = the
// earliest recorder's start); otherwise timestamps are kept as they are. Throws UserError naming the file
// that cannot be read, is not a trace, or repeats a rank another file already has.
void merge_into(const std::vector<std::string>& files, const std::string& out);

// `text` written as write() writes a trace: atomically, or not at all (UserError naming the path).
void write_trace_file(const std::string& path, const std::string& text);

}  // namespace braid::io
