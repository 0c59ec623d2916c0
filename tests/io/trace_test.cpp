// Chrome traces: event names, lanes recorded from concurrent threads (right lane, proper nesting), the file
// (Python's json module parses it; metadata present), drops when a lane is full, atomic writes that leave
// an existing file intact on failure, merging per-process files, and idle time per lane.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <regex>
#include <thread>

#include "core/resource_error.h"
#include "io/trace.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

// One complete ("X") event read back from a line of the file (write() puts one event per line).
struct FileEvent {
  std::string name;
  int pid = -1, tid = -1;
  int64_t start_ns = 0, end_ns = 0;
};

std::vector<FileEvent> complete_events(const std::string& text) {
  static const std::regex re(
      R"re(\{"ph":"X","name":"([^"]*)","cat":"[a-z]+","pid":(\d+),"tid":(\d+),)re"
      R"re("ts":([0-9.e+-]+),"dur":([0-9.e+-]+),)re");
  std::vector<FileEvent> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    double ts = std::stod(m[4]), dur = std::stod(m[5]);
    out.push_back({m[1], std::stoi(m[2]), std::stoi(m[3]), std::llround(ts * 1000), std::llround((ts + dur) * 1000)});
  }
  return out;
}

// True when no two events of a lane partly overlap: each is inside the other or apart.
::testing::AssertionResult properly_nested(std::vector<FileEvent> evs) {
  std::sort(evs.begin(), evs.end(), [](const FileEvent& a, const FileEvent& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  std::vector<const FileEvent*> open;
  for (const FileEvent& e : evs) {
    while (!open.empty() && open.back()->end_ns <= e.start_ns) open.pop_back();
    if (!open.empty() && e.end_ns > open.back()->end_ns)
      return ::testing::AssertionFailure() << "'" << e.name << "' overlaps '" << open.back()->name << "'";
    open.push_back(&e);
  }
  return ::testing::AssertionSuccess();
}

bool have_python() { return ::access(BRAID_PYTHON, X_OK) == 0; }

// Runs a Python check on `file` (the script reads sys.argv[1]); returns its exit status.
int python_check(const TempDir& dir, const std::string& script, const std::string& file) {
  std::string py = dir.file("check.py");
  write_file(py, script);
  std::string cmd = std::string(BRAID_PYTHON) + " " + py + " " + file;
  return std::system(cmd.c_str());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

bool has_temp_files(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(TraceNames, KindsHaveNames) {
  EXPECT_EQ(trace_kind_name(TraceKind::Forward), "forward");
  EXPECT_EQ(trace_kind_name(TraceKind::Recv), "recv");
  EXPECT_EQ(trace_kind_name(TraceKind::Collective), "collective");
  EXPECT_EQ(trace_kind_name(TraceKind::Checkpoint), "checkpoint");
  for (int k = 0; k < kTraceKindCount; ++k) EXPECT_FALSE(trace_kind_name(static_cast<TraceKind>(k)).empty());
}

TEST(TraceNames, FormattedFromKindLayersMicroBatchPeer) {
  EXPECT_EQ(trace_name({.kind = TraceKind::Forward, .first_layer = "h.0", .last_layer = "h.1", .micro_batch = 3}),
            "F h.0-h.1 mb3");
  EXPECT_EQ(trace_name({.kind = TraceKind::Backward, .first_layer = "h.0", .last_layer = "h.1", .micro_batch = 3}),
            "B h.0-h.1 mb3");
  EXPECT_EQ(trace_name({.kind = TraceKind::Backward, .first_layer = "h.0", .last_layer = "h.0", .micro_batch = 0}),
            "B h.0 mb0");
  EXPECT_EQ(trace_name({.kind = TraceKind::Send, .what = "act", .micro_batch = 3, .peer = 1}), "send act mb3 -> dev1");
  EXPECT_EQ(trace_name({.kind = TraceKind::Recv, .what = "grad", .micro_batch = 3, .peer = 0}),
            "recv grad mb3 <- dev0");
  EXPECT_EQ(trace_name({.kind = TraceKind::Collective, .what = "all_reduce grads", .bytes = 12.5e6}),
            "all_reduce grads 12.5 MB");
  EXPECT_EQ(trace_name({.kind = TraceKind::Optimizer, .first_layer = "h.0", .last_layer = "h.3"}), "optimizer h.0-h.3");
  EXPECT_EQ(trace_name({.kind = TraceKind::Checkpoint}), "checkpoint");
}

TEST(TraceNames, SizesRoundToThreeDigitsInDecimalUnits) {
  auto sized = [](double b) { return std::string(trace_name({.kind = TraceKind::Collective, .bytes = b}).view()); };
  EXPECT_EQ(sized(0), "0 B");
  EXPECT_EQ(sized(512), "512 B");
  EXPECT_EQ(sized(999.6), "1 kB");
  EXPECT_EQ(sized(1234567), "1.23 MB");
  EXPECT_EQ(sized(999999), "1 MB");
  EXPECT_EQ(sized(3.5e9), "3.5 GB");
}

TEST(TraceNames, LongNamesAreCutVisibly) {
  std::string layer(200, 'x');
  TraceName n = trace_name({.kind = TraceKind::Forward, .first_layer = layer, .micro_batch = 1});
  EXPECT_EQ(n.view().size(), TraceName::kCapacity);
  EXPECT_EQ(n.view().back(), '~');
  EXPECT_EQ(n.view().substr(0, 4), "F xx");
}

TEST(TraceLane, NestsEventsAndPublishesThemWhenTheyEnd) {
  TraceRecorder rec(device_lanes(1, "cpu"));
  TraceLane& lane = rec.lane(0);
  EXPECT_EQ(lane.name(), "device 0 (cpu)");
  lane.begin(TraceKind::Forward, "F h.0 mb0", 0, {{"stage", 0}});
  {
    size_t bytes = 4096;
    TraceScope s(&lane, {.kind = TraceKind::Send, .what = "act", .micro_batch = 0, .peer = 1}, {{"bytes", bytes}});
    EXPECT_EQ(lane.depth(), 2);
    EXPECT_EQ(lane.size(), 0u);  // nothing ended yet
  }
  EXPECT_EQ(lane.size(), 1u);
  lane.end();
  ASSERT_EQ(lane.size(), 2u);
  std::vector<TraceEvent> evs = lane.events();
  EXPECT_EQ(evs[0].name, "send act mb0 -> dev1");
  EXPECT_EQ(evs[0].num_args, 1);
  EXPECT_STREQ(evs[0].args[0].key, "bytes");
  EXPECT_EQ(evs[0].args[0].value, 4096);
  EXPECT_EQ(evs[1].name, "F h.0 mb0");
  EXPECT_LE(evs[1].start_ns, evs[0].start_ns);
  EXPECT_GE(evs[1].end_ns, evs[0].end_ns);
  EXPECT_THROW(lane.end(), InternalError);  // end() without begin()
  EXPECT_THROW(rec.lane(7), InternalError);
}

// Scopes without a lane (tracing off) record nothing and leave an enclosing real scope intact: the lane holds
// exactly the outer event, ended once, nothing dropped.
TEST(TraceLane, NullScopeRecordsNothing) {
  TraceRecorder rec(device_lanes(1, "cpu"), TraceOptions{});
  TraceLane& lane = rec.lane(0);
  {
    TraceScope outer(&lane, TraceKind::Forward, "fc", 2);
    TraceScope a(nullptr, TraceKind::Eval, "eval");
    TraceScope b(nullptr, {.kind = TraceKind::Data, .what = "batch 3"});
  }
  ASSERT_EQ(lane.size(), 1u);
  const TraceEvent e = lane.events()[0];
  EXPECT_EQ(e.kind, TraceKind::Forward);
  EXPECT_EQ(e.micro_batch, 2);
  EXPECT_GE(e.end_ns, e.start_ns);
  EXPECT_EQ(rec.dropped(), 0);
}

TEST(TraceLane, FullLaneDropsAndCounts) {
  TraceRecorder rec(device_lanes(2, "cpu"), TraceOptions{.lane_capacity = 3});
  TraceLane& lane = rec.lane(1);
  for (int i = 0; i < 5; ++i) TraceScope s(&lane, {.kind = TraceKind::Forward, .first_layer = "fc", .micro_batch = i});
  EXPECT_EQ(lane.size(), 3u);
  EXPECT_EQ(lane.capacity(), 3u);
  EXPECT_EQ(lane.dropped(), 2);
  EXPECT_EQ(rec.lane(0).dropped(), 0);
  EXPECT_EQ(rec.dropped(), 2);
  std::vector<TraceEvent> evs = lane.events();
  EXPECT_EQ(evs.back().name, "F fc mb2");  // the first ones are kept
  std::string json = rec.json();
  EXPECT_EQ(count(json, "\"ph\":\"X\""), 3u);
  EXPECT_NE(json.find("\"name\":\"trace lane full: 2 events dropped\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"dropped_events\":2"), std::string::npos);
}

TEST(TraceRecorder, FourThreadsRecordIntoTheirOwnLanes) {
  constexpr int kThreads = 4, kMicroBatches = 40;
  TraceRecorder rec(device_lanes(kThreads, "cpu"));
  std::latch start(kThreads + 1);
  std::vector<std::thread> workers;
  for (int d = 0; d < kThreads; ++d) {
    workers.emplace_back([&, d] {
      TraceLane& lane = rec.lane(d);
      std::string layer = "t" + std::to_string(d);
      start.arrive_and_wait();
      for (int mb = 0; mb < kMicroBatches; ++mb) {
        TraceScope f(&lane, {.kind = TraceKind::Forward, .first_layer = layer, .micro_batch = mb});
        { TraceScope r(&lane, {.kind = TraceKind::Recv, .what = layer, .micro_batch = mb, .peer = (d + 3) % 4}); }
        { TraceScope s(&lane, {.kind = TraceKind::Send, .what = layer, .micro_batch = mb, .peer = (d + 1) % 4}); }
      }
      TraceScope o(&lane, {.kind = TraceKind::Optimizer, .first_layer = layer}, {{"stage", d}});
    });
  }
  start.arrive_and_wait();
  std::string during = rec.json();  // a reader while the workers record: sees only finished events
  for (auto& w : workers) w.join();
  std::vector<FileEvent> early = complete_events(during);
  EXPECT_LE(early.size(), size_t{kThreads} * (3 * kMicroBatches + 1));
  for (int d = 0; d < kThreads; ++d) {
    std::vector<FileEvent> lane;
    std::copy_if(early.begin(), early.end(), std::back_inserter(lane), [&](const FileEvent& e) { return e.tid == d; });
    EXPECT_TRUE(properly_nested(lane)) << "lane " << d << " while recording";
  }

  TempDir dir;
  rec.write(dir.file("trace.json"));
  std::string text = read_bytes(dir.file("trace.json"));
  std::vector<FileEvent> evs = complete_events(text);
  ASSERT_EQ(evs.size(), size_t{kThreads} * (3 * kMicroBatches + 1));
  std::vector<std::vector<FileEvent>> per_lane(kThreads);
  for (const FileEvent& e : evs) {
    ASSERT_EQ(e.pid, 0);
    ASSERT_GE(e.tid, 0);
    ASSERT_LT(e.tid, kThreads);
    // Every event names its thread ("F t2 mb5", "send t2 mb5 -> dev3"): it must sit in that thread's lane.
    EXPECT_NE((e.name + " ").find(" t" + std::to_string(e.tid) + " "), std::string::npos) << e.name << " on " << e.tid;
    per_lane[e.tid].push_back(e);
  }
  for (int d = 0; d < kThreads; ++d) {
    EXPECT_EQ(per_lane[d].size(), size_t{3 * kMicroBatches + 1});
    EXPECT_TRUE(properly_nested(per_lane[d])) << "lane " << d;
  }
}

TEST(TraceRecorder, FileParsesAsJsonWithMetadata) {
  TraceRecorder rec(device_lanes(2, "cpu"), TraceOptions{.rank = 3, .process_name = "trainer \"A\""});
  {
    TraceScope f(&rec.lane(1),
                 {.kind = TraceKind::Forward, .first_layer = "h.0", .last_layer = "h.1", .micro_batch = 3});
    TraceScope c(&rec.lane(1), {.kind = TraceKind::Collective, .what = "all_reduce grads", .bytes = 12.5e6},
                 {{"bytes", 12.5e6}});
  }
  TempDir dir;
  std::string path = dir.file("trace.json");
  rec.write(path);
  if (!have_python()) GTEST_SKIP() << BRAID_PYTHON << " not found: the JSON was not checked by Python";
  const std::string script = R"py(
import json, sys
t = json.load(open(sys.argv[1]))
assert t["displayTimeUnit"] == "ms", t
assert t["otherData"] == {"producer": "braid", "rank": 3, "dropped_events": 0}, t["otherData"]
ev = t["traceEvents"]
meta = {(e["name"], e.get("tid")): e["args"] for e in ev if e["ph"] == "M"}
assert all(e["pid"] == 3 for e in ev)
assert meta[("process_name", 0)] == {"name": 'trainer "A"'}, meta
assert meta[("process_sort_index", 0)] == {"sort_index": 3}, meta
assert meta[("thread_name", 0)] == {"name": "device 0 (cpu)"}, meta
assert meta[("thread_name", 1)] == {"name": "device 1 (cpu)"}, meta
assert meta[("thread_sort_index", 1)] == {"sort_index": 1}, meta
x = [e for e in ev if e["ph"] == "X"]
assert [e["name"] for e in x] == ["F h.0-h.1 mb3", "all_reduce grads 12.5 MB"], x
assert [e["cat"] for e in x] == ["forward", "collective"], x
assert x[0]["args"] == {"mb": 3} and x[1]["args"] == {"bytes": 12500000}, x
for e in x:
    assert set(e) == {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"}, e
    assert e["tid"] == 1 and e["dur"] >= 0 and e["ts"] >= 0, e
assert x[0]["ts"] <= x[1]["ts"] and x[1]["ts"] + x[1]["dur"] <= x[0]["ts"] + x[0]["dur"] + 1e-6, x
)py";
  EXPECT_EQ(python_check(dir, script, path), 0) << read_bytes(path);
}

TEST(TraceRecorder, WriteIntoMissingFolderIsAUserError) {
  TempDir dir;
  TraceRecorder rec(device_lanes(1, "cpu"));
  std::string msg = user_error([&] { rec.write(dir.file("no/such/folder/trace.json")); });
  EXPECT_NE(msg.find(dir.file("no/such/folder/trace.json") + ": error: cannot write the trace"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("hint: the folder '" + dir.file("no/such/folder") + "' does not exist"), std::string::npos) << msg;
}

TEST(TraceRecorder, FailedWriteLeavesTheExistingFileIntact) {
  TempDir dir;
  std::string path = dir.file("trace.json");
  const std::string before = "{\"traceEvents\":[], \"previous\": \"run\"}\n" + std::string(2000, ' ');
  write_file(path, before);
  TraceRecorder rec(device_lanes(1, "cpu"));
  for (int mb = 0; mb < 100; ++mb) TraceScope s(&rec.lane(0), {.kind = TraceKind::Forward, .micro_batch = mb});
  ASSERT_GT(rec.json().size(), 4096u);
  // A write that fails half-way: files may not grow past 1 KiB (EFBIG, also for root).
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    rec.write(path);
  } catch (const ResourceError& e) {  // over the size limit: the machine's failure, as a full disk (exit 1)
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find(path + ": cannot write the trace: cannot write the temporary file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(has_temp_files(dir.path()));
  // And once writing works again, the file is replaced whole.
  rec.write(path);
  EXPECT_EQ(read_bytes(path), rec.json());
}

TEST(TraceRecorder, RenameOntoAFolderFailsCleanly) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("trace.json"));
  write_file(dir.file("trace.json/keep"), "x");
  TraceRecorder rec(device_lanes(1, "cpu"));
  std::string msg = user_error([&] { rec.write(dir.file("trace.json")); });
  EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(dir.file("trace.json/keep")), "x");
  EXPECT_FALSE(has_temp_files(dir.path()));
}

TEST(TraceMerge, KeepsBothProcesses) {
  TempDir dir;
  for (int rank = 0; rank < 2; ++rank) {
    TraceRecorder rec(device_lanes(2, "cpu"), TraceOptions{.rank = rank});
    std::string layer = "r" + std::to_string(rank);
    for (int d = 0; d < 2; ++d)
      TraceScope s(&rec.lane(d), {.kind = TraceKind::Forward, .first_layer = layer, .micro_batch = d});
    rec.write(dir.file("rank" + std::to_string(rank) + ".json"));
  }
  std::string out = dir.file("merged.json");
  merge_into({dir.file("rank0.json"), dir.file("rank1.json")}, out);
  std::string text = read_bytes(out);
  std::vector<FileEvent> evs = complete_events(text);
  ASSERT_EQ(evs.size(), 4u);
  for (const FileEvent& e : evs) EXPECT_EQ(e.name.substr(0, 4), "F r" + std::to_string(e.pid)) << e.name;
  EXPECT_EQ(count(text, "\"name\":\"process_name\""), 2u);
  EXPECT_EQ(count(text, "\"name\":\"thread_name\""), 4u);
  EXPECT_NE(text.find("\"otherData\":{\"producer\":\"braid\",\"ranks\":[0,1],\"dropped_events\":0}"),
            std::string::npos)
      << text;
  if (!have_python()) GTEST_SKIP() << BRAID_PYTHON << " not found: the merged JSON was not checked by Python";
  const std::string script = R"py(
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
assert {e["pid"] for e in ev} == {0, 1}, ev
names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {(0, "braid rank 0"), (1, "braid rank 1")}, names
assert len([e for e in ev if e["ph"] == "X"]) == 4
)py";
  EXPECT_EQ(python_check(dir, script, out), 0) << text;
}

TEST(TraceMerge, RejectsRepeatedRanksAndNonTraces) {
  TempDir dir;
  TraceRecorder rec(device_lanes(1, "cpu"));
  rec.write(dir.file("a.json"));
  rec.write(dir.file("b.json"));
  std::string msg = user_error([&] { merge_into({dir.file("a.json"), dir.file("b.json")}, dir.file("m.json")); });
  EXPECT_NE(msg.find(dir.file("b.json") + ": error: trace of rank 0, which '" + dir.file("a.json") + "' already holds"),
            std::string::npos)
      << msg;
  write_file(dir.file("bad.json"), "{\"traceEvents\": [{\"ph\": \"X\"}");
  msg = user_error([&] { merge_into({dir.file("bad.json")}, dir.file("m.json")); });
  EXPECT_NE(msg.find(dir.file("bad.json") + ": error: not a trace file"), std::string::npos) << msg;
  write_file(dir.file("other.json"), "{\"events\": []}");
  msg = user_error([&] { merge_into({dir.file("other.json")}, dir.file("m.json")); });
  EXPECT_NE(msg.find("no \"traceEvents\" array"), std::string::npos) << msg;
  msg = user_error([&] { merge_into({dir.file("missing.json")}, dir.file("m.json")); });
  EXPECT_NE(msg.find(dir.file("missing.json")), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.json")));
}

TEST(TraceMerge, AcceptsTheBareArrayFormAndEmptyTraces) {
  TempDir dir;
  write_file(dir.file("bare.json"), R"([{"ph":"X","name":"k","pid":7,"tid":0,"ts":1,"dur":2}])");
  TraceRecorder rec({}, TraceOptions{.rank = 1});
  rec.write(dir.file("empty.json"));
  merge_into({dir.file("bare.json"), dir.file("empty.json")}, dir.file("m.json"));
  std::string text = read_bytes(dir.file("m.json"));
  EXPECT_NE(text.find(R"({"ph":"X","name":"k","pid":7)"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ranks\":[1]"), std::string::npos) << text;
}

// Two ranks on two "hosts": rank 1's steady clock reads 5 s behind rank 0's (faked by recording its event
// 5 s earlier on its own clock), and its offset to the reference clock is +5 s. Events that happened at the
// same moment land on the same timestamp of the merged file; ts 0 is the earlier recorder's origin.
TEST(TraceMerge, ShiftsEachRankOntoTheReferenceClock) {
  TempDir dir;
  constexpr int64_t kSkewNs = 5'000'000'000;
  TraceRecorder r0(device_lanes(1, "cpu"), TraceOptions{.rank = 0, .clock_offset_ns = 0});
  std::this_thread::sleep_for(std::chrono::milliseconds(3));  // r1 starts later: a positive shift
  std::vector<TraceLaneSpec> lanes1{{1, "device 1 (cpu)"}};
  TraceRecorder r1(lanes1, TraceOptions{.rank = 1, .clock_offset_ns = kSkewNs});
  const int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch()).count();  // the shared moment
  const double at0 = static_cast<double>(t - r0.origin_steady_ns()) / 1000.0;
  const double at1 = static_cast<double>(t - kSkewNs - r1.origin_steady_ns()) / 1000.0;  // on rank 1's clock
  r0.lane(0).complete(TraceKind::Forward, "F r0", 0, at0, at0 + 100);
  r1.lane(1).complete(TraceKind::Forward, "F r1", 0, at1, at1 + 100);
  EXPECT_NE(r1.json().find("\"clock_origin_ns\":" + std::to_string(r1.origin_steady_ns() + kSkewNs)),
            std::string::npos);
  r0.write(dir.file("p0.json"));
  r1.write(dir.file("p1.json"));
  merge_into({dir.file("p1.json"), dir.file("p0.json")}, dir.file("m.json"));
  std::string text = read_bytes(dir.file("m.json"));
  std::vector<FileEvent> evs = complete_events(text);
  ASSERT_EQ(evs.size(), 2u) << text;
  const FileEvent& e1 = evs[0].pid == 1 ? evs[0] : evs[1];
  const FileEvent& e0 = evs[0].pid == 1 ? evs[1] : evs[0];
  EXPECT_EQ(e0.pid, 0);
  EXPECT_NEAR(static_cast<double>(e0.start_ns), at0 * 1000, 2);  // rank 0 started first: not shifted
  EXPECT_NEAR(static_cast<double>(e1.start_ns), static_cast<double>(e0.start_ns), 2) << text;
  EXPECT_NEAR(static_cast<double>(e1.end_ns - e1.start_ns), 100'000, 2);
  // Files without clock origins are concatenated as they are.
  TraceRecorder plain(device_lanes(1, "cpu"), TraceOptions{.rank = 2});
  plain.lane(0).complete(TraceKind::Forward, "F plain", 0, 7, 8);
  plain.write(dir.file("p2.json"));
  merge_into({dir.file("p1.json"), dir.file("p2.json")}, dir.file("m2.json"));
  for (const FileEvent& e : complete_events(read_bytes(dir.file("m2.json"))))
    EXPECT_NEAR(static_cast<double>(e.start_ns), e.pid == 2 ? 7000 : at1 * 1000, 2) << e.name;
}

TEST(TraceActivity, IdleFractionPerLane) {
  TraceRecorder rec(device_lanes(2, "cpu"));
  TraceLane& a = rec.lane(0);
  TraceLane& b = rec.lane(1);
  a.complete(TraceKind::Forward, "F", 0, 0, 10);
  a.complete(TraceKind::Backward, "B", 0, 20, 30);
  a.complete(TraceKind::Forward, "F inner", 0, 22, 25);  // nested: counted once
  a.complete(TraceKind::Send, "send", 0, 30, 50);         // not a compute kind
  b.complete(TraceKind::Forward, "F", 0, 10, 40);
  TraceActivity act = rec.activity();
  EXPECT_DOUBLE_EQ(act.window_us, 40);
  ASSERT_EQ(act.lanes.size(), 2u);
  EXPECT_DOUBLE_EQ(act.lanes[0].busy_us, 20);
  EXPECT_DOUBLE_EQ(act.lanes[0].idle_fraction, 0.5);
  EXPECT_DOUBLE_EQ(act.lanes[1].busy_us, 30);
  EXPECT_DOUBLE_EQ(act.lanes[1].idle_fraction, 0.25);
  TraceActivity all = rec.activity({TraceKind::Forward, TraceKind::Backward, TraceKind::Send});
  EXPECT_DOUBLE_EQ(all.window_us, 50);
  EXPECT_DOUBLE_EQ(all.lanes[0].busy_us, 40);
}
