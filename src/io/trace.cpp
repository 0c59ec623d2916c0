// Chrome traces: lock-free lanes, the Trace Event Format writer, atomic file writes and the merge of
// per-process files. The merge reads files with a small JSON skimmer that finds the top-level members
// and the span of each value without building a tree (json.h deliberately has no parser).
#include "io/trace.h"

#include "core/resource_error.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "core/error.h"
#include "io/json.h"
#include "io/paths.h"

namespace braid::io {

namespace fs = std::filesystem;

std::string_view trace_kind_name(TraceKind kind) {
  switch (kind) {
    case TraceKind::Forward: return "forward";
    case TraceKind::Backward: return "backward";
    case TraceKind::Send: return "send";
    case TraceKind::Recv: return "recv";
    case TraceKind::Collective: return "collective";
    case TraceKind::Optimizer: return "optimizer";
    case TraceKind::Data: return "data";
    case TraceKind::Eval: return "eval";
    case TraceKind::Checkpoint: return "checkpoint";
  }
  BRAID_ASSERT(false, "unknown TraceKind ", static_cast<int>(kind));
}

TraceName& TraceName::append(std::string_view s) {
  size_t room = kCapacity - size_;
  size_t n = std::min(room, s.size());
  std::memcpy(buf_.data() + size_, s.data(), n);
  size_ = static_cast<uint8_t>(size_ + n);
  if (n < s.size()) buf_[kCapacity - 1] = '~';  // cut: say so
  return *this;
}

namespace {

// The short word a name starts with; collectives have none (`what` names the operation).
std::string_view kind_word(TraceKind kind) {
  switch (kind) {
    case TraceKind::Forward: return "F";
    case TraceKind::Backward: return "B";
    case TraceKind::Collective: return "";
    default: return trace_kind_name(kind);
  }
}

// 12.5e6 -> "12.5 MB": three significant digits, decimal units, the unit chosen after rounding.
void append_bytes(TraceName& name, double bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (u < 4 && bytes >= 999.5) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, kUnits[u]);
  name.append(buf);
}

}  // namespace

TraceName trace_name(const TraceLabel& label) {
  TraceName name;
  bool empty = true;
  auto word = [&](std::string_view w) {
    if (w.empty()) return;
    if (!empty) name.append(" ");
    name.append(w);
    empty = false;
  };
  word(kind_word(label.kind));
  word(label.what);
  if (!label.first_layer.empty()) {
    word(label.first_layer);
    if (!label.last_layer.empty() && label.last_layer != label.first_layer) name.append("-").append(label.last_layer);
  }
  char buf[32];
  if (label.micro_batch >= 0) {
    std::snprintf(buf, sizeof buf, "mb%d", label.micro_batch);
    word(buf);
  }
  if (label.peer >= 0) {
    std::snprintf(buf, sizeof buf, "%s dev%d", label.kind == TraceKind::Recv ? "<-" : "->", label.peer);
    word(buf);
  }
  if (label.bytes >= 0) {
    if (!empty) name.append(" ");
    append_bytes(name, label.bytes);
  }
  return name;
}

// ---- lanes ----

TraceLane::TraceLane(int id, std::string name, size_t capacity)
    : id_(id), name_(std::move(name)), events_(capacity) {}

int64_t TraceLane::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

double TraceLane::now_us() const { return static_cast<double>(now_ns()) / 1000.0; }

void TraceLane::begin(TraceKind kind, TraceName name, int micro_batch, std::initializer_list<TraceArg> args) {
  BRAID_ASSERT(depth_ < kMaxDepth, "trace lane '", name_, "': more than ", kMaxDepth, " nested events");
  BRAID_ASSERT(args.size() <= kMaxTraceArgs, "trace event '", name.view(), "': more than ", kMaxTraceArgs, " args");
  TraceEvent& e = open_[static_cast<size_t>(depth_++)];
  e.kind = kind;
  e.name = name;
  e.micro_batch = micro_batch;
  e.num_args = static_cast<uint8_t>(args.size());
  std::copy(args.begin(), args.end(), e.args.begin());
  e.start_ns = now_ns();
}

void TraceLane::begin(const TraceLabel& label, std::initializer_list<TraceArg> args) {
  begin(label.kind, trace_name(label), label.micro_batch, args);
}

void TraceLane::end() {
  int64_t t = now_ns();
  BRAID_ASSERT(depth_ > 0, "trace lane '", name_, "': end() without begin()");
  TraceEvent& e = open_[static_cast<size_t>(--depth_)];
  e.end_ns = t;
  publish(e);
}

void TraceLane::complete(TraceKind kind, TraceName name, int micro_batch, double start_us, double end_us,
                         std::initializer_list<TraceArg> args) {
  BRAID_ASSERT(args.size() <= kMaxTraceArgs, "trace event '", name.view(), "': more than ", kMaxTraceArgs, " args");
  BRAID_ASSERT(end_us >= start_us, "trace event '", name.view(), "' ends before it starts");
  TraceEvent e;
  e.kind = kind;
  e.name = name;
  e.micro_batch = micro_batch;
  e.num_args = static_cast<uint8_t>(args.size());
  std::copy(args.begin(), args.end(), e.args.begin());
  e.start_ns = std::llround(start_us * 1000.0);
  e.end_ns = std::llround(end_us * 1000.0);
  publish(e);
}

void TraceLane::publish(const TraceEvent& e) {
  // One writer per lane: plain loads of our own counters; release so readers see the slot filled.
  size_t n = count_.load(std::memory_order_relaxed);
  if (n == events_.size()) {
    int64_t d = dropped_.load(std::memory_order_relaxed);
    if (d == 0) first_drop_ns_.store(e.end_ns, std::memory_order_relaxed);
    dropped_.store(d + 1, std::memory_order_release);
    return;
  }
  events_[n] = e;
  count_.store(n + 1, std::memory_order_release);
}

std::vector<TraceEvent> TraceLane::events() const {
  size_t n = size();
  return std::vector<TraceEvent>(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<TraceLaneSpec> device_lanes(int devices, std::string_view device_kind) {
  std::vector<TraceLaneSpec> lanes;
  for (int d = 0; d < devices; ++d)
    lanes.push_back({d, "device " + std::to_string(d) + " (" + std::string(device_kind) + ")"});
  return lanes;
}

// ---- the recorder and its file ----

TraceRecorder::TraceRecorder(std::vector<TraceLaneSpec> lanes, TraceOptions options)
    : options_(std::move(options)) {
  if (options_.process_name.empty()) options_.process_name = "braid rank " + std::to_string(options_.rank);
  for (size_t i = 0; i < lanes.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      BRAID_ASSERT(lanes[j].id != lanes[i].id, "trace: two lanes with id ", lanes[i].id);
    lanes_.push_back(std::make_unique<TraceLane>(lanes[i].id, std::move(lanes[i].name), options_.lane_capacity));
  }
  // After the buffers are allocated and zeroed, so that time 0 is when recording can begin.
  origin_ = std::chrono::steady_clock::now();
  for (auto& l : lanes_) l->origin_ = origin_;
}

TraceLane& TraceRecorder::lane(int id) {
  for (auto& l : lanes_)
    if (l->id() == id) return *l;
  BRAID_ASSERT(false, "trace: no lane with id ", id);
}

double TraceRecorder::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

int64_t TraceRecorder::origin_steady_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(origin_.time_since_epoch()).count();
}

int64_t TraceRecorder::dropped() const {
  int64_t n = 0;
  for (const auto& l : lanes_) n += l->dropped();
  return n;
}

namespace {

double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

std::string metadata(std::string_view what, int pid, int tid, std::string_view arg, const std::string& name,
                     int sort_index) {
  JsonWriter w;
  w.begin_object().field("ph", "M").field("name", what).field("pid", pid).field("tid", tid).key("args").begin_object();
  if (arg == "name") w.field("name", name);
  else w.field("sort_index", sort_index);
  w.end_object().end_object();
  return w.str();
}

std::string complete_event(const TraceEvent& e, int pid, int tid) {
  JsonWriter w;
  w.begin_object().field("ph", "X").field("name", e.name.view()).field("cat", trace_kind_name(e.kind));
  w.field("pid", pid).field("tid", tid).field("ts", us(e.start_ns)).field("dur", us(e.end_ns - e.start_ns));
  w.key("args").begin_object();
  if (e.micro_batch >= 0) w.field("mb", e.micro_batch);
  for (size_t i = 0; i < e.num_args; ++i) w.field(e.args[i].key, e.args[i].value);
  w.end_object().end_object();
  return w.str();
}

// The trace file around a list of event texts.
std::string trace_file(const std::vector<std::string>& events, const std::string& other_data) {
  std::string out = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    out += events[i];
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + other_data + "}\n";
  return out;
}

[[noreturn]] void write_failed(const std::string& path, const std::string& what, int err) {
  std::string hint;
  fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (err == ENOENT && !dir.empty() && !fs::is_directory(dir, ec))
    hint = "the folder '" + dir.string() + "' does not exist";
  throw_os_error(err, SourceLoc{path, 0, 0}, "cannot write the trace: " + what + ": " + std::strerror(err), hint);
}

// Temporary file beside `path`, written, fsynced and renamed over it; on any failure the temporary file
// is removed and `path` is as it was.
void write_atomically(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  fs::path p(path);
  std::string tmp = (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter.fetch_add(1))))
                        .string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) write_failed(path, "cannot create the temporary file '" + tmp + "'", errno);
  auto fail = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    write_failed(path, what, err);
  };
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write the temporary file '" + tmp + "'");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot sync '" + tmp + "'");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("cannot close '" + tmp + "'");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename '" + tmp + "' over it");
  std::string folder = p.parent_path().empty() ? "." : p.parent_path().string();
  int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename is done; a folder that cannot be synced is not worth failing the run
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

std::string TraceRecorder::json() const {
  const int pid = options_.rank;
  std::vector<std::string> events;
  // 1. Metadata: the process, then one named, ordered lane per device.
  events.push_back(metadata("process_name", pid, 0, "name", options_.process_name, 0));
  events.push_back(metadata("process_sort_index", pid, 0, "sort_index", "", pid));
  for (size_t i = 0; i < lanes_.size(); ++i) {
    events.push_back(metadata("thread_name", pid, lanes_[i]->id(), "name", lanes_[i]->name(), 0));
    events.push_back(metadata("thread_sort_index", pid, lanes_[i]->id(), "sort_index", "", static_cast<int>(i)));
  }
  // Counter tracks (add_counter) at time 0.
  for (const Counter& c : counters_) {
    JsonWriter w;
    w.begin_object().field("ph", "C").field("name", c.name).field("pid", pid).field("tid", c.lane).field("ts", 0);
    w.key("args").begin_object();
    for (const auto& [k, v] : c.values) w.field(k, v);
    w.end_object().end_object();
    events.push_back(w.str());
  }
  // 2. Each lane's events, parents before children (start ascending, end descending).
  for (const auto& lane : lanes_) {
    std::vector<TraceEvent> evs = lane->events();
    std::stable_sort(evs.begin(), evs.end(), [](const TraceEvent& a, const TraceEvent& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    for (const TraceEvent& e : evs) events.push_back(complete_event(e, pid, lane->id()));
    // 3. Where a lane filled up, a marker: the lane's record is incomplete from here on.
    if (int64_t d = lane->dropped(); d > 0) {
      JsonWriter w;
      w.begin_object().field("ph", "i").field("s", "t").field("cat", "trace");
      w.field("name", "trace lane full: " + std::to_string(d) + " events dropped");
      w.field("pid", pid).field("tid", lane->id()).field("ts", us(lane->first_drop_ns()));
      w.key("args").begin_object().field("dropped", d).end_object().end_object();
      events.push_back(w.str());
    }
  }
  JsonWriter other;
  other.begin_object().field("producer", "braid").field("rank", pid).field("dropped_events", dropped());
  if (options_.clock_offset_ns) other.field("clock_origin_ns", origin_steady_ns() + *options_.clock_offset_ns);
  other.end_object();
  return trace_file(events, other.str());
}

void TraceRecorder::write(const std::string& path) const { write_atomically(path, json()); }

void TraceRecorder::add_counter(int lane_id, std::string name, std::vector<std::pair<std::string, double>> values) {
  counters_.push_back(Counter{lane_id, std::move(name), std::move(values)});
}

void write_trace_file(const std::string& path, const std::string& text) { write_atomically(path, text); }

TraceActivity TraceRecorder::activity(std::initializer_list<TraceKind> kinds) const {
  TraceActivity out;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(lanes_.size());
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    for (const TraceEvent& e : lanes_[i]->events()) {
      if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) continue;
      spans[i].emplace_back(e.start_ns, e.end_ns);
      t0 = std::min(t0, e.start_ns);
      t1 = std::max(t1, e.end_ns);
    }
  }
  out.window_us = t1 > t0 ? us(t1 - t0) : 0;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    // The union of the lane's intervals: nested and overlapping events count once.
    auto& s = spans[i];
    std::sort(s.begin(), s.end());
    int64_t busy = 0, cur_start = 0, cur_end = INT64_MIN;
    for (auto [a, b] : s) {
      if (a > cur_end) {
        if (cur_end != INT64_MIN) busy += cur_end - cur_start;
        cur_start = a;
        cur_end = b;
      } else {
        cur_end = std::max(cur_end, b);
      }
    }
    if (cur_end != INT64_MIN) busy += cur_end - cur_start;
    LaneActivity la{lanes_[i]->id(), us(busy), 0};
    la.idle_fraction = out.window_us > 0 ? 1.0 - la.busy_us / out.window_us : 0;
    out.lanes.push_back(la);
  }
  return out;
}

// ---- merging per-process files ----

namespace {

// Finds the spans of JSON values without building them. Validates structure (brackets, strings, commas,
// colons) but not the spelling of numbers and literals, which the merge copies through unread.
class Skimmer {
 public:
  Skimmer(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  std::string_view value(int depth = 0) {
    if (depth > 512) fail("nested too deeply");
    ws();
    if (i_ >= s_.size()) fail("unexpected end of file");
    size_t b = i_;
    char c = s_[i_];
    if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++i_;
      ws();
      if (peek() == close) {
        ++i_;
      } else {
        for (;;) {
          if (c == '{') {
            ws();
            if (peek() != '"') fail("expected a key");
            string();
            ws();
            expect(':');
          }
          value(depth + 1);
          ws();
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect(close);
          break;
        }
      }
    } else if (c == '"') {
      string();
    } else {
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '+' || s_[i_] == '-' ||
                                 s_[i_] == '.')) ++i_;
      if (i_ == b) fail(std::string("unexpected character '") + c + "'");
    }
    return s_.substr(b, i_ - b);
  }

  // The members of an object span as (key with its quotes, value span).
  std::vector<std::pair<std::string_view, std::string_view>> members() {
    std::vector<std::pair<std::string_view, std::string_view>> out;
    ws();
    expect('{');
    ws();
    if (peek() == '}') return out;
    for (;;) {
      ws();
      std::string_view key = string();
      ws();
      expect(':');
      out.emplace_back(key, value(1));
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return out;
    }
  }

  // The elements of an array span.
  std::vector<std::string_view> elements() {
    std::vector<std::string_view> out;
    ws();
    expect('[');
    ws();
    if (peek() == ']') return out;
    for (;;) {
      out.push_back(value(1));
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return out;
    }
  }

  void end() {
    ws();
    if (i_ != s_.size()) fail("trailing text after the JSON value");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string_view string() {
    size_t b = i_;
    expect('"');
    while (i_ < s_.size() && s_[i_] != '"') i_ += s_[i_] == '\\' ? 2 : 1;
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return s_.substr(b, i_ - b);
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(SourceLoc{path_, 0, 0}, "not a trace file: " + what + " at byte " + std::to_string(i_),
                    "merge takes Trace Event Format JSON files, as written by --trace");
  }

  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
};

// The text between an array's brackets, trimmed; "" for an empty array.
std::string_view array_body(std::string_view arr) {
  std::string_view body = arr.substr(1, arr.size() - 2);
  size_t b = body.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = body.find_last_not_of(" \t\r\n");
  return body.substr(b, e - b + 1);
}

std::optional<int64_t> as_int(std::string_view v) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return x;
}

// The array's events with every numeric "ts" moved by shift_us (others copied as they are), joined by ",\n".
std::string shifted_events(std::string_view arr, double shift_us, const std::string& path) {
  std::string out;
  Skimmer sk(arr, path);
  for (std::string_view ev : sk.elements()) {
    if (!out.empty()) out += ",\n";
    if (ev.front() != '{') {
      out += ev;
      continue;
    }
    Skimmer obj(ev, path);
    out += '{';
    bool first = true;
    for (auto [key, v] : obj.members()) {
      if (!first) out += ',';
      first = false;
      out += key;
      out += ':';
      double ts = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ts);
      if (key == "\"ts\"" && ec == std::errc() && p == v.data() + v.size()) {
        JsonWriter w;
        w.value(std::round((ts + shift_us) * 1000.0) / 1000.0);  // ns resolution, as write() has
        out += w.str();
      } else {
        out += v;
      }
    }
    out += '}';
  }
  return out;
}

}  // namespace

void merge_into(const std::vector<std::string>& files, const std::string& out) {
  std::vector<std::string> texts;  // owns what the spans below point into
  texts.reserve(files.size());
  std::vector<std::string> events;
  std::vector<std::pair<int64_t, std::string>> ranks;  // rank, file
  int64_t dropped = 0;
  std::vector<std::string_view> arrays;          // each file's traceEvents
  std::vector<std::optional<int64_t>> origins;  // each file's clock_origin_ns
  for (const std::string& file : files) {
    std::optional<int64_t> origin;
    texts.push_back(read_file(file));
    Skimmer top(texts.back(), file);
    std::string_view value = top.value();
    top.end();
    std::string_view arr;
    if (value.front() == '[') {  // the bare-array form of the format
      arr = value;
    } else if (value.front() == '{') {
      Skimmer obj(value, file);
      for (auto [key, v] : obj.members()) {
        if (key == "\"traceEvents\"" && v.front() == '[') arr = v;
        if (key != "\"otherData\"" || v.front() != '{') continue;
        Skimmer other(v, file);
        for (auto [k, x] : other.members()) {
          if (k == "\"dropped_events\"") dropped += as_int(x).value_or(0);
          if (k == "\"clock_origin_ns\"") origin = as_int(x);
          if (k != "\"rank\"") continue;
          std::optional<int64_t> r = as_int(x);
          if (!r) continue;
          for (const auto& [seen, where] : ranks)
            if (seen == *r)
              throw UserError(SourceLoc{file, 0, 0}, "trace of rank " + std::to_string(*r) + ", which '" + where +
                                                         "' already holds",
                              "each process records with its own rank (TraceOptions::rank)");
          ranks.emplace_back(*r, file);
        }
      }
    }
    if (arr.empty())
      throw UserError(SourceLoc{file, 0, 0}, "not a trace file: no \"traceEvents\" array",
                      "merge takes Trace Event Format JSON files, as written by --trace");
    arrays.push_back(arr);
    origins.push_back(origin);
  }
  // One common clock when every file says where its origin lies on it; time 0 = the earliest origin.
  const bool aligned = !origins.empty() && std::all_of(origins.begin(), origins.end(), [](auto& o) { return o.has_value(); });
  int64_t base = INT64_MAX;
  if (aligned)
    for (const auto& o : origins) base = std::min(base, *o);
  for (size_t f = 0; f < arrays.size(); ++f) {
    const double shift_us = aligned ? static_cast<double>(*origins[f] - base) / 1000.0 : 0.0;
    if (shift_us != 0) {
      if (std::string body = shifted_events(arrays[f], shift_us, files[f]); !body.empty()) events.push_back(std::move(body));
    } else if (std::string_view body = array_body(arrays[f]); !body.empty()) {
      events.emplace_back(body);
    }
  }
  JsonWriter other;
  other.begin_object().field("producer", "braid").key("ranks").begin_array();
  for (const auto& r : ranks) other.value(r.first);
  other.end_array().field("dropped_events", dropped).end_object();
  write_atomically(out, trace_file(events, other.str()));
}

}  // namespace braid::io
