// Generators say only in which order each device computes (the schedule proper); place_communication()
// derives every send and recv from that order, so a new schedule is a new compute order. The checker
// trusts nothing from the generators: it re-derives every property from the instruction lists alone.
// Deliberately absent: real costs per stage (unit F = 1, B = 2), collectives between devices of this
// schedule (AllReduceGrads synchronises a stage with its data-parallel replicas, outside this schedule).
#include "exec/schedule.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace braid::exec {

namespace {

struct Step {
  bool forward;
  int stage;
  int mb;
};
using ComputeOrder = std::vector<std::vector<Step>>;  // per device

void require_positive(const std::string& schedule, const char* what, int value) {
  if (value < 1)
    throw UserError(SourceLoc{}, schedule + ": " + what + " must be at least 1, got " + std::to_string(value),
                    std::string("give a positive number of ") + what);
}

// Start and end of every forward and backward when each device runs its compute order as soon as its
// inputs exist (communication free, unbounded buffers). Indexed by stage * M + mb.
struct Timing {
  std::vector<int> fwd_start, fwd_end, bwd_start, bwd_end;
};

Timing as_soon_as_possible(int devices, int stages, int mbs, const ComputeOrder& order) {
  const size_t n = static_cast<size_t>(stages) * mbs;
  Timing t{std::vector<int>(n, -1), std::vector<int>(n, -1), std::vector<int>(n, -1), std::vector<int>(n, -1)};
  std::vector<size_t> pc(devices, 0);
  std::vector<int> clock(devices, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < devices; ++d) {
      for (; pc[d] < order[d].size(); ++pc[d], progress = true) {
        const Step& st = order[d][pc[d]];
        const size_t i = static_cast<size_t>(st.stage) * mbs + st.mb;
        int ready = clock[d];
        if (st.forward) {
          if (st.stage > 0) {
            if (t.fwd_end[i - mbs] < 0) break;
            ready = std::max(ready, t.fwd_end[i - mbs]);
          }
          t.fwd_start[i] = ready;
          t.fwd_end[i] = clock[d] = ready + kForwardTime;
        } else {
          if (t.fwd_end[i] < 0) break;
          ready = std::max(ready, t.fwd_end[i]);
          if (st.stage + 1 < stages) {
            if (t.bwd_end[i + mbs] < 0) break;
            ready = std::max(ready, t.bwd_end[i + mbs]);
          }
          t.bwd_start[i] = ready;
          t.bwd_end[i] = clock[d] = ready + kBackwardTime;
        }
      }
    }
  }
  for (int d = 0; d < devices; ++d)
    BRAID_ASSERT(pc[d] == order[d].size(), "the compute order of device ", d, " cannot run past step ", pc[d]);
  return t;
}

// Each message (and each compute step) gets a key; every device's list is its events sorted by key.
// A send and its recv share one key, so all devices list their communication in one global order and
// the lowest-keyed unfinished event can always run: the lists cannot deadlock, whatever the real timing.
// The key's time is the earliest moment in [produced, needed] at which neither device is mid-compute, so
// under unit costs a rendezvous never delays either side and the lists run in the as-soon-as-possible time.
struct Event {
  int time;
  int phase;  // 0: communication (before any compute starting at the same time), 1: compute
  int a, b, c;
  Instr instr;
  auto key() const { return std::tie(time, phase, a, b, c); }
};

Schedule place_communication(std::string name, int devices, int stages, int mbs, const ComputeOrder& order) {
  const Timing t = as_soon_as_possible(devices, stages, mbs, order);
  auto device_of = [&](int stage) { return stage % devices; };
  std::vector<std::vector<Event>> events(devices);
  std::vector<std::vector<std::pair<int, int>>> busy(devices);  // compute intervals per device
  for (int d = 0; d < devices; ++d) {
    for (size_t k = 0; k < order[d].size(); ++k) {
      const Step& st = order[d][k];
      const size_t i = static_cast<size_t>(st.stage) * mbs + st.mb;
      const int start = st.forward ? t.fwd_start[i] : t.bwd_start[i];
      const int end = st.forward ? t.fwd_end[i] : t.bwd_end[i];
      busy[d].emplace_back(start, end);
      events[d].push_back({start, 1, static_cast<int>(k), 0, 0,
                           Instr{st.forward ? InstrKind::Forward : InstrKind::Backward, st.stage, st.mb, -1}});
    }
  }
  auto mid_compute = [&](int d, int time) {
    return std::any_of(busy[d].begin(), busy[d].end(), [&](auto iv) { return iv.first < time && time < iv.second; });
  };
  auto meeting_time = [&](int from, int to, int produced, int needed) {
    for (int time = produced; time <= needed; ++time)
      if (!mid_compute(from, time) && !mid_compute(to, time)) return time;
    return produced;  // still deadlock-free (the global order holds); only the timing may suffer
  };
  for (int s = 0; s + 1 < stages; ++s) {
    const int lo = device_of(s), hi = device_of(s + 1);
    if (lo == hi) continue;  // consecutive chunks on one device hand over through memory
    for (int mb = 0; mb < mbs; ++mb) {
      const size_t i = static_cast<size_t>(s) * mbs + mb, j = i + mbs;
      const int ta = meeting_time(lo, hi, t.fwd_end[i], t.fwd_start[j]);
      events[lo].push_back({ta, 0, 0, s, mb, Instr{InstrKind::SendActivation, s, mb, hi}});
      events[hi].push_back({ta, 0, 0, s, mb, Instr{InstrKind::RecvActivation, s + 1, mb, lo}});
      const int tg = meeting_time(hi, lo, t.bwd_end[j], t.bwd_start[i]);
      events[hi].push_back({tg, 0, 1, s, mb, Instr{InstrKind::SendGrad, s + 1, mb, lo}});
      events[lo].push_back({tg, 0, 1, s, mb, Instr{InstrKind::RecvGrad, s, mb, hi}});
    }
  }
  Schedule out{std::move(name), devices, stages, mbs, std::vector<std::vector<Instr>>(devices)};
  for (int d = 0; d < devices; ++d) {
    std::sort(events[d].begin(), events[d].end(), [](const Event& x, const Event& y) { return x.key() < y.key(); });
    for (const Event& e : events[d]) out.per_device[d].push_back(e.instr);
    // Gradient sync in the order the stages finish their last backward; then the optimizer steps.
    std::vector<std::pair<int, int>> last_backward;  // (end time, stage)
    for (int s = d; s < stages; s += devices) last_backward.emplace_back(t.bwd_end[static_cast<size_t>(s) * mbs + mbs - 1], s);
    std::sort(last_backward.begin(), last_backward.end());
    for (auto [end, s] : last_backward) out.per_device[d].push_back(Instr{InstrKind::AllReduceGrads, s, -1, -1});
    for (int s = d; s < stages; s += devices) out.per_device[d].push_back(Instr{InstrKind::OptimizerStep, s, -1, -1});
  }
  return out;
}

}  // namespace

Schedule gpipe(int devices, int micro_batches) {
  require_positive("gpipe", "devices", devices);
  require_positive("gpipe", "micro_batches", micro_batches);
  ComputeOrder order(devices);
  for (int d = 0; d < devices; ++d) {
    for (int mb = 0; mb < micro_batches; ++mb) order[d].push_back({true, d, mb});
    for (int mb = 0; mb < micro_batches; ++mb) order[d].push_back({false, d, mb});
  }
  return place_communication("gpipe", devices, devices, micro_batches, order);
}

Schedule one_f_one_b(int devices, int micro_batches) {
  require_positive("1f1b", "devices", devices);
  require_positive("1f1b", "micro_batches", micro_batches);
  ComputeOrder order(devices);
  for (int d = 0; d < devices; ++d) {
    const int warmup = std::min(devices - d - 1, micro_batches);
    for (int mb = 0; mb < warmup; ++mb) order[d].push_back({true, d, mb});
    for (int k = 0; k + warmup < micro_batches; ++k) {
      order[d].push_back({true, d, warmup + k});
      order[d].push_back({false, d, k});
    }
    for (int mb = micro_batches - warmup; mb < micro_batches; ++mb) order[d].push_back({false, d, mb});
  }
  return place_communication("1f1b", devices, devices, micro_batches, order);
}

// The order of Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward on a device
// runs chunk (k mod D*v) / D on micro-batch (k / (D*v)) * D + k mod D, i.e. groups of D micro-batches go
// through chunk 0, then chunk 1, ...; backwards walk the chunks in reverse. Device r warms up with
// (D - r - 1) * 2 + (v - 1) * D forwards (all of them when M == D), then alternates, then drains.
Schedule interleaved_1f1b(int devices, int chunks_per_device, int micro_batches) {
  const std::string what = "interleaved_1f1b";
  require_positive(what, "devices", devices);
  require_positive(what, "chunks_per_device", chunks_per_device);
  require_positive(what, "micro_batches", micro_batches);
  if (micro_batches % devices != 0)
    throw UserError(SourceLoc{},
                    what + ": micro_batches (" + std::to_string(micro_batches) + ") must be a multiple of the " +
                        std::to_string(devices) + " pipeline devices",
                    "use " + std::to_string((micro_batches / devices + 1) * devices) +
                        " micro-batches, or the non-interleaved 1f1b schedule");
  const int D = devices, v = chunks_per_device, total = v * micro_batches, group = D * v;
  auto chunk_step = [&](int r, int k, bool forward) {
    int chunk = (k % group) / D;
    if (!forward) chunk = v - 1 - chunk;
    return Step{forward, chunk * D + r, (k / group) * D + k % D};
  };
  ComputeOrder order(D);
  for (int r = 0; r < D; ++r) {
    const int warmup = micro_batches == D ? total : std::min((D - r - 1) * 2 + (v - 1) * D, total);
    for (int k = 0; k < warmup; ++k) order[r].push_back(chunk_step(r, k, true));
    for (int k = 0; k + warmup < total; ++k) {
      order[r].push_back(chunk_step(r, warmup + k, true));
      order[r].push_back(chunk_step(r, k, false));
    }
    for (int k = total - warmup; k < total; ++k) order[r].push_back(chunk_step(r, k, false));
  }
  return place_communication(what, D, D * v, micro_batches, order);
}

double analytic_bubble_fraction(int devices, int chunks_per_device, int micro_batches) {
  return static_cast<double>(devices - 1) / (chunks_per_device * micro_batches + devices - 1);
}

std::string to_string(InstrKind kind) {
  switch (kind) {
    case InstrKind::Forward: return "Forward";
    case InstrKind::Backward: return "Backward";
    case InstrKind::SendActivation: return "SendActivation";
    case InstrKind::RecvActivation: return "RecvActivation";
    case InstrKind::SendGrad: return "SendGrad";
    case InstrKind::RecvGrad: return "RecvGrad";
    case InstrKind::AllReduceGrads: return "AllReduceGrads";
    case InstrKind::OptimizerStep: return "OptimizerStep";
  }
  return "?";
}

namespace {

bool is_send(InstrKind k) { return k == InstrKind::SendActivation || k == InstrKind::SendGrad; }
bool is_recv(InstrKind k) { return k == InstrKind::RecvActivation || k == InstrKind::RecvGrad; }
bool has_mb(InstrKind k) { return k != InstrKind::AllReduceGrads && k != InstrKind::OptimizerStep; }
// The stage on the other end of a send or recv.
int neighbour(const Instr& in) {
  return in.kind == InstrKind::SendActivation || in.kind == InstrKind::RecvGrad ? in.stage + 1 : in.stage - 1;
}
// The recv that matches a send.
Instr matching_recv(const Instr& send, int sender) {
  return Instr{send.kind == InstrKind::SendActivation ? InstrKind::RecvActivation : InstrKind::RecvGrad,
               neighbour(send), send.micro_batch, sender};
}

std::string token(const Instr& in) {
  const std::string sm = std::to_string(in.stage) + "." + std::to_string(in.micro_batch);
  const std::string p = std::to_string(in.peer_device);
  switch (in.kind) {
    case InstrKind::Forward: return "F" + sm;
    case InstrKind::Backward: return "B" + sm;
    case InstrKind::SendActivation: return "Sa" + sm + ">" + p;
    case InstrKind::RecvActivation: return "Ra" + sm + "<" + p;
    case InstrKind::SendGrad: return "Sg" + sm + ">" + p;
    case InstrKind::RecvGrad: return "Rg" + sm + "<" + p;
    case InstrKind::AllReduceGrads: return "AR" + std::to_string(in.stage);
    case InstrKind::OptimizerStep: return "OPT" + std::to_string(in.stage);
  }
  return "?";
}

}  // namespace

std::string to_string(const Instr& in) {
  std::string s = to_string(in.kind) + "(stage " + std::to_string(in.stage);
  if (has_mb(in.kind)) s += ", mb " + std::to_string(in.micro_batch);
  if (is_send(in.kind)) s += ", to device " + std::to_string(in.peer_device);
  if (is_recv(in.kind)) s += ", from device " + std::to_string(in.peer_device);
  return s + ")";
}

std::string to_text(const Schedule& sc, bool show_comm) {
  std::ostringstream os;
  os << sc.name << ": " << sc.devices << " devices, " << sc.stages << " stages, " << sc.micro_batches
     << " micro-batches\n";
  for (size_t d = 0; d < sc.per_device.size(); ++d) {
    os << "d" << d << ":";
    for (const Instr& in : sc.per_device[d])
      if (show_comm || !(is_send(in.kind) || is_recv(in.kind))) os << " " << token(in);
    os << "\n";
  }
  return os.str();
}

namespace {

// Collects problems, each naming a device and an instruction; keeps the report readable.
class Problems {
 public:
  void add(std::string p) {
    if (list_.size() < kMax) list_.push_back(std::move(p));
    ++count_;
  }
  void at(const Schedule& sc, int d, size_t i, const std::string& what) {
    add("device " + std::to_string(d) + " instruction " + std::to_string(i) + " " +
        to_string(sc.per_device[d][i]) + ": " + what);
  }
  bool empty() const { return count_ == 0; }
  std::string str() const {
    std::string s;
    for (const auto& p : list_) s += (s.empty() ? "" : "\n") + p;
    if (count_ > kMax) s += "\n... and " + std::to_string(count_ - kMax) + " more";
    return s;
  }

 private:
  static constexpr size_t kMax = 20;
  std::vector<std::string> list_;
  size_t count_ = 0;
};

// Every field in range, every instruction on the device of its stage, sends and recvs only between
// consecutive stages on different devices, naming the right peer.
void check_fields(const Schedule& sc, Problems& pb) {
  const int S = sc.stages, M = sc.micro_batches;
  for (int d = 0; d < sc.devices; ++d) {
    for (size_t i = 0; i < sc.per_device[d].size(); ++i) {
      const Instr& in = sc.per_device[d][i];
      if (in.stage < 0 || in.stage >= S) {
        pb.at(sc, d, i, "stage out of range [0, " + std::to_string(S) + ")");
        continue;
      }
      if (device_of_stage(sc, in.stage) != d)
        pb.at(sc, d, i, "stage " + std::to_string(in.stage) + " lives on device " +
                            std::to_string(device_of_stage(sc, in.stage)));
      if (has_mb(in.kind) && (in.micro_batch < 0 || in.micro_batch >= M))
        pb.at(sc, d, i, "micro-batch out of range [0, " + std::to_string(M) + ")");
      if (!is_send(in.kind) && !is_recv(in.kind)) continue;
      const int n = neighbour(in);
      if (n < 0 || n >= S) {
        pb.at(sc, d, i, "stage " + std::to_string(in.stage) + " has no stage " + std::to_string(n) + " to talk to");
      } else if (device_of_stage(sc, n) == d) {
        pb.at(sc, d, i, "stages " + std::to_string(in.stage) + " and " + std::to_string(n) +
                            " are both on this device; they hand over through memory, not send/recv");
      } else if (in.peer_device != device_of_stage(sc, n)) {
        pb.at(sc, d, i, "stage " + std::to_string(n) + " lives on device " + std::to_string(device_of_stage(sc, n)));
      }
    }
  }
}

// Walks each device's list in order: inputs before use, forward before backward, each (stage, mb)
// forward and backward exactly once, gradient sync after the last backward, optimizer after the sync.
// Also counts the in-flight micro-batches (forwards whose backward has not yet run).
void check_device_order(const Schedule& sc, Problems& pb, std::vector<int>& peak) {
  const int S = sc.stages, M = sc.micro_batches;
  auto idx = [&](int s, int mb) { return static_cast<size_t>(s) * M + mb; };
  const size_t n = static_cast<size_t>(S) * M;
  // Position of each event on its device, -1 = not yet.
  std::vector<long> fwd(n, -1), bwd(n, -1), got_act(n, -1), got_grad(n, -1), sent_act(n, -1), sent_grad(n, -1);
  std::vector<long> reduced(S, -1), stepped(S, -1);
  std::vector<int> backwards_of(S, 0);
  peak.assign(sc.devices, 0);
  auto once = [&](std::vector<long>& seen, size_t k, int d, size_t i) {
    if (seen[k] >= 0) pb.at(sc, d, i, "runs twice on this device (also instruction " + std::to_string(seen[k]) + ")");
    seen[k] = static_cast<long>(i);
  };
  for (int d = 0; d < sc.devices; ++d) {
    int in_flight = 0;
    for (size_t i = 0; i < sc.per_device[d].size(); ++i) {
      const Instr& in = sc.per_device[d][i];
      const int s = in.stage, mb = in.micro_batch;
      const std::string prev = std::to_string(s - 1) + ", mb " + std::to_string(mb);
      const std::string next = std::to_string(s + 1) + ", mb " + std::to_string(mb);
      const std::string self = std::to_string(s) + ", mb " + std::to_string(mb);
      switch (in.kind) {
        case InstrKind::Forward:
          if (s > 0 && device_of_stage(sc, s - 1) == d && fwd[idx(s - 1, mb)] < 0)
            pb.at(sc, d, i, "runs before its input: no earlier Forward(stage " + prev + ") on this device");
          if (s > 0 && device_of_stage(sc, s - 1) != d && got_act[idx(s, mb)] < 0)
            pb.at(sc, d, i, "runs before its input: no earlier RecvActivation(stage " + self + ")");
          if (reduced[s] >= 0) pb.at(sc, d, i, "runs after AllReduceGrads(stage " + std::to_string(s) + ")");
          once(fwd, idx(s, mb), d, i);
          peak[d] = std::max(peak[d], ++in_flight);
          break;
        case InstrKind::Backward:
          if (fwd[idx(s, mb)] < 0) pb.at(sc, d, i, "runs before Forward(stage " + self + ")");
          else --in_flight;
          if (s + 1 < S && device_of_stage(sc, s + 1) == d && bwd[idx(s + 1, mb)] < 0)
            pb.at(sc, d, i, "runs before its output gradient: no earlier Backward(stage " + next + ") on this device");
          if (s + 1 < S && device_of_stage(sc, s + 1) != d && got_grad[idx(s, mb)] < 0)
            pb.at(sc, d, i, "runs before its output gradient: no earlier RecvGrad(stage " + self + ")");
          if (reduced[s] >= 0) pb.at(sc, d, i, "runs after AllReduceGrads(stage " + std::to_string(s) + ")");
          once(bwd, idx(s, mb), d, i);
          ++backwards_of[s];
          break;
        case InstrKind::SendActivation:
          if (fwd[idx(s, mb)] < 0) pb.at(sc, d, i, "sends before Forward(stage " + self + ") produced it");
          once(sent_act, idx(s, mb), d, i);
          break;
        case InstrKind::SendGrad:
          if (bwd[idx(s, mb)] < 0) pb.at(sc, d, i, "sends before Backward(stage " + self + ") produced it");
          once(sent_grad, idx(s, mb), d, i);
          break;
        case InstrKind::RecvActivation: once(got_act, idx(s, mb), d, i); break;
        case InstrKind::RecvGrad: once(got_grad, idx(s, mb), d, i); break;
        case InstrKind::AllReduceGrads:
          if (backwards_of[s] < M)
            pb.at(sc, d, i, "runs after only " + std::to_string(backwards_of[s]) + " of " + std::to_string(M) +
                                " backwards of its stage");
          if (reduced[s] >= 0) pb.at(sc, d, i, "runs twice (also instruction " + std::to_string(reduced[s]) + ")");
          reduced[s] = static_cast<long>(i);
          break;
        case InstrKind::OptimizerStep:
          if (reduced[s] < 0) pb.at(sc, d, i, "runs before AllReduceGrads(stage " + std::to_string(s) + ")");
          if (stepped[s] >= 0) pb.at(sc, d, i, "runs twice (also instruction " + std::to_string(stepped[s]) + ")");
          stepped[s] = static_cast<long>(i);
          break;
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    const std::string where = " (device " + std::to_string(device_of_stage(sc, s)) + ")";
    for (int mb = 0; mb < M; ++mb) {
      const std::string what = "(stage " + std::to_string(s) + ", mb " + std::to_string(mb) + ")";
      if (fwd[idx(s, mb)] < 0) pb.add("Forward" + what + " never runs" + where);
      if (bwd[idx(s, mb)] < 0) pb.add("Backward" + what + " never runs" + where);
    }
    if (reduced[s] < 0) pb.add("AllReduceGrads(stage " + std::to_string(s) + ") never runs" + where);
    if (stepped[s] < 0) pb.add("OptimizerStep(stage " + std::to_string(s) + ") never runs" + where);
  }
}

// One FIFO channel per ordered device pair: its k-th send matches its k-th recv.
struct Channel {
  int from, to;
  std::vector<size_t> sends, recvs;  // instruction positions on `from` and on `to`
};

std::map<std::pair<int, int>, Channel> match_channels(const Schedule& sc, Problems& pb) {
  std::map<std::pair<int, int>, Channel> channels;
  for (int d = 0; d < sc.devices; ++d) {
    for (size_t i = 0; i < sc.per_device[d].size(); ++i) {
      const Instr& in = sc.per_device[d][i];
      if (is_send(in.kind)) {
        auto& ch = channels[{d, in.peer_device}];
        ch.from = d, ch.to = in.peer_device;
        ch.sends.push_back(i);
      } else if (is_recv(in.kind)) {
        auto& ch = channels[{in.peer_device, d}];
        ch.from = in.peer_device, ch.to = d;
        ch.recvs.push_back(i);
      }
    }
  }
  for (const auto& [key, ch] : channels) {
    const std::string name = "channel device " + std::to_string(ch.from) + " -> device " + std::to_string(ch.to);
    const auto& src = sc.per_device[ch.from];
    const auto& dst = sc.per_device[ch.to];
    for (size_t k = 0; k < std::min(ch.sends.size(), ch.recvs.size()); ++k) {
      const Instr& send = src[ch.sends[k]];
      const Instr& recv = dst[ch.recvs[k]];
      if (!(matching_recv(send, ch.from) == recv))
        pb.add("mismatch on " + name + ", message " + std::to_string(k) + ": device " + std::to_string(ch.from) +
               " instruction " + std::to_string(ch.sends[k]) + " sends " + to_string(send) + " but device " +
               std::to_string(ch.to) + " instruction " + std::to_string(ch.recvs[k]) + " receives " +
               to_string(recv) + " (expected " + to_string(matching_recv(send, ch.from)) + ")");
    }
    if (ch.sends.size() > ch.recvs.size()) {
      const size_t i = ch.sends[ch.recvs.size()];
      pb.add("mismatch on " + name + ": " + std::to_string(ch.sends.size()) + " sends but " +
             std::to_string(ch.recvs.size()) + " recvs; device " + std::to_string(ch.from) + " instruction " +
             std::to_string(i) + " " + to_string(src[i]) + " is never received");
    } else if (ch.recvs.size() > ch.sends.size()) {
      const size_t i = ch.recvs[ch.sends.size()];
      pb.add("mismatch on " + name + ": " + std::to_string(ch.sends.size()) + " sends but " +
             std::to_string(ch.recvs.size()) + " recvs; device " + std::to_string(ch.to) + " instruction " +
             std::to_string(i) + " " + to_string(dst[i]) + " is never sent");
    }
  }
  return channels;
}

// Runs the lists with blocking semantics and unit costs. Returns "" or the deadlock report.
std::string simulate(const Schedule& sc, const std::map<std::pair<int, int>, Channel>& channels, int capacity,
                     ScheduleCheck& result) {
  const int D = sc.devices, M = sc.micro_batches;
  // Times of each message's events, -1 = not yet; and each instruction's channel and message number.
  struct Times {
    std::vector<int> send_posted, send_done, recv_posted, recv_done;
  };
  std::map<std::pair<int, int>, Times> times;
  std::vector<std::vector<size_t>> message(D);
  for (int d = 0; d < D; ++d) message[d].assign(sc.per_device[d].size(), 0);
  for (const auto& [key, ch] : channels) {
    const size_t n = ch.sends.size();
    times[key] = Times{std::vector<int>(n, -1), std::vector<int>(n, -1), std::vector<int>(n, -1), std::vector<int>(n, -1)};
    for (size_t k = 0; k < n; ++k) message[ch.from][ch.sends[k]] = message[ch.to][ch.recvs[k]] = k;
  }
  std::vector<int> fwd_end(static_cast<size_t>(sc.stages) * M, -1);
  std::vector<size_t> pc(D, 0);
  std::vector<int> clock(D, 0);
  result.busy.assign(D, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < D; ++d) {
      for (; pc[d] < sc.per_device[d].size(); ++pc[d], progress = true) {
        const Instr& in = sc.per_device[d][pc[d]];
        const size_t k = message[d][pc[d]];
        if (in.kind == InstrKind::Forward || in.kind == InstrKind::Backward) {
          const int cost = in.kind == InstrKind::Forward ? kForwardTime : kBackwardTime;
          if (in.kind == InstrKind::Forward) {
            const size_t i = static_cast<size_t>(in.stage) * M + in.micro_batch;
            BRAID_ASSERT(in.stage == 0 || (fwd_end[i - M] >= 0 && fwd_end[i - M] <= clock[d]),
                         "checker: ", to_string(in), " on device ", d, " ran before its input was produced");
            fwd_end[i] = clock[d] + cost;
          }
          clock[d] += cost;
          result.busy[d] += cost;
        } else if (is_send(in.kind)) {
          Times& t = times.at({d, in.peer_device});
          if (t.send_posted[k] < 0) t.send_posted[k] = clock[d];
          if (t.send_done[k] < 0) {
            if (capacity == 0) {  // rendezvous: done when the recv is posted
              if (t.recv_posted[k] < 0) break;
              t.send_done[k] = t.recv_done[k] = std::max(t.send_posted[k], t.recv_posted[k]);
            } else {  // buffered: done when the channel has room
              int room = 0;
              if (k >= static_cast<size_t>(capacity)) {
                if (t.recv_done[k - capacity] < 0) break;
                room = t.recv_done[k - capacity];
              }
              t.send_done[k] = std::max(t.send_posted[k], room);
            }
          }
          clock[d] = t.send_done[k];
        } else if (is_recv(in.kind)) {
          Times& t = times.at({in.peer_device, d});
          if (t.recv_posted[k] < 0) t.recv_posted[k] = clock[d];
          if (t.recv_done[k] < 0) {
            if (capacity == 0) {
              if (t.send_posted[k] < 0) break;
              t.send_done[k] = t.recv_done[k] = std::max(t.send_posted[k], t.recv_posted[k]);
            } else {
              if (t.send_done[k] < 0) break;
              t.recv_done[k] = std::max(t.recv_posted[k], t.send_done[k]);
            }
          }
          clock[d] = t.recv_done[k];
        }
      }
    }
  }
  result.makespan = *std::max_element(clock.begin(), clock.end());
  std::string stuck;
  for (int d = 0; d < D; ++d) {
    if (pc[d] == sc.per_device[d].size()) continue;
    const Instr& in = sc.per_device[d][pc[d]];
    const bool send = is_send(in.kind);
    const auto key = send ? std::make_pair(d, in.peer_device) : std::make_pair(in.peer_device, d);
    const Channel& ch = channels.at(key);
    const size_t k = message[d][pc[d]];
    std::string why;
    if (send && capacity > 0) {
      const size_t j = ch.recvs[k - capacity];
      why = "waiting for room on the channel (capacity " + std::to_string(capacity) + "): device " +
            std::to_string(in.peer_device) + " must first reach instruction " + std::to_string(j) + " " +
            to_string(sc.per_device[in.peer_device][j]);
    } else {
      const size_t j = send ? ch.recvs[k] : ch.sends[k];
      why = "waiting for device " + std::to_string(in.peer_device) + " to reach instruction " + std::to_string(j) +
            " " + to_string(sc.per_device[in.peer_device][j]);
    }
    stuck += "\n  device " + std::to_string(d) + " is stuck at instruction " + std::to_string(pc[d]) + " " +
             to_string(in) + ", " + why;
  }
  return stuck.empty() ? "" : "deadlock (" + std::string(capacity == 0 ? "rendezvous channels" : "channel capacity " + std::to_string(capacity)) + "):" + stuck;
}

}  // namespace

ScheduleCheck check_schedule(const Schedule& sc, int channel_capacity) {
  ScheduleCheck r;
  BRAID_ASSERT(channel_capacity >= 0, "channel_capacity must be >= 0, got ", channel_capacity);
  if (sc.devices < 1 || sc.stages < 1 || sc.micro_batches < 1 ||
      sc.per_device.size() != static_cast<size_t>(sc.devices)) {
    r.message = "malformed schedule '" + sc.name + "': " + std::to_string(sc.devices) + " devices, " +
                std::to_string(sc.stages) + " stages, " + std::to_string(sc.micro_batches) + " micro-batches, " +
                std::to_string(sc.per_device.size()) + " instruction lists";
    return r;
  }
  // 1. Fields in range, stages on their devices, sends and recvs between the right peers.
  Problems pb;
  check_fields(sc, pb);
  if (!pb.empty()) {
    r.message = pb.str();
    return r;
  }
  // 2. Each device's order: inputs before use, exactly once, sync and step at the end.
  check_device_order(sc, pb, r.peak_in_flight);
  // 3. Every channel's sends and recvs pair up in order.
  const auto channels = match_channels(sc, pb);
  if (!pb.empty()) {
    r.message = pb.str();
    return r;
  }
  // 4. Blocking execution: every instruction runs (no deadlock); unit-time makespan.
  const std::string deadlock = simulate(sc, channels, channel_capacity, r);
  if (!deadlock.empty()) {
    r.message = deadlock;
    return r;
  }
  long busy = 0;
  for (int b : r.busy) busy += b;
  r.bubble_fraction = r.makespan == 0 ? 0.0 : 1.0 - static_cast<double>(busy) / (static_cast<double>(sc.devices) * r.makespan);
  std::ostringstream os;
  os << "ok: " << sc.name << ", makespan " << r.makespan << ", bubble " << r.bubble_fraction << ", peak in flight";
  for (int p : r.peak_in_flight) os << " " << p;
  r.message = os.str();
  r.ok = true;
  return r;
}

std::vector<int> stage_slots(const Schedule& schedule) {
  std::vector<int> slots(static_cast<size_t>(schedule.stages), 1);
  for (const auto& list : schedule.per_device) {
    std::vector<std::vector<bool>> held(slots.size(), std::vector<bool>(static_cast<size_t>(schedule.micro_batches)));
    std::vector<int> live(slots.size(), 0);
    for (const Instr& in : list) {
      if (in.micro_batch < 0) continue;
      auto st = static_cast<size_t>(in.stage);
      auto mb = static_cast<size_t>(in.micro_batch);
      if (!held[st][mb]) {
        held[st][mb] = true;
        slots[st] = std::max(slots[st], ++live[st]);
      }
      if ((in.kind == InstrKind::SendGrad) || (in.kind == InstrKind::Backward && in.stage == 0)) --live[st];
    }
  }
  return slots;
}

void SlotBook::reset(int stage, int slots, int micro_batches) {
  stage_ = stage;
  free_.clear();
  for (int s = slots; s-- > 0;) free_.push_back(s);
  slot_of_.assign(static_cast<size_t>(micro_batches), -1);
}

int SlotBook::take(int mb) {
  int& s = slot_of_.at(static_cast<size_t>(mb));
  if (s < 0) {
    BRAID_ASSERT(!free_.empty(), "stage ", stage_, " has no free slot for micro-batch ", mb);
    s = free_.back();
    free_.pop_back();
  }
  return s;
}

void SlotBook::release(int mb) {
  free_.push_back(slot_of_.at(static_cast<size_t>(mb)));
  slot_of_[static_cast<size_t>(mb)] = -1;
}

}  // namespace braid::exec
