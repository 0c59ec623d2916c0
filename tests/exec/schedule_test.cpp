// Pipeline schedules as data: the three generators pass the static checker at every small shape, with the
// textbook makespans and activation bounds, and hand-broken lists are reported naming device and instruction.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "exec/schedule.h"

using namespace braid;
using namespace braid::exec;

namespace {

Instr F(int s, int mb) { return {InstrKind::Forward, s, mb, -1}; }
Instr B(int s, int mb) { return {InstrKind::Backward, s, mb, -1}; }
Instr send_act(int s, int mb, int to) { return {InstrKind::SendActivation, s, mb, to}; }
Instr recv_act(int s, int mb, int from) { return {InstrKind::RecvActivation, s, mb, from}; }
Instr send_grad(int s, int mb, int to) { return {InstrKind::SendGrad, s, mb, to}; }
Instr recv_grad(int s, int mb, int from) { return {InstrKind::RecvGrad, s, mb, from}; }
Instr all_reduce(int s) { return {InstrKind::AllReduceGrads, s, -1, -1}; }
Instr step(int s) { return {InstrKind::OptimizerStep, s, -1, -1}; }

size_t position(const std::vector<Instr>& list, const Instr& in) {
  auto it = std::find(list.begin(), list.end(), in);
  EXPECT_NE(it, list.end()) << to_string(in);
  return static_cast<size_t>(it - list.begin());
}

bool is_comm(const Instr& in) {
  return in.kind == InstrKind::SendActivation || in.kind == InstrKind::RecvActivation ||
         in.kind == InstrKind::SendGrad || in.kind == InstrKind::RecvGrad;
}

// A slow, obvious reference for rendezvous semantics: devices take turns; a compute step runs when its
// inputs are among the device's tokens; a send runs only together with the peer's current recv carrying
// the same message. True when every list runs to its end and every step ran exactly once.
bool reference_runs(const Schedule& s) {
  enum What { kFwd, kBwd, kActIn, kGradIn, kSync, kStep };
  std::set<std::tuple<int, int, int, int>> have;  // (device, what, stage, mb)
  auto put = [&](int d, What w, int st, int mb) { return have.insert({d, w, st, mb}).second; };
  auto has = [&](int d, What w, int st, int mb) { return have.count({d, w, st, mb}) > 0; };
  auto on = [&](int st) { return st % s.devices; };
  std::vector<size_t> pc(s.devices, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < s.devices; ++d) {
      if (pc[d] == s.per_device[d].size()) continue;
      const Instr in = s.per_device[d][pc[d]];
      const int st = in.stage, mb = in.micro_batch;
      if (st < 0 || st >= s.stages || on(st) != d || mb >= s.micro_batches) return false;
      bool ok = true;
      switch (in.kind) {
        case InstrKind::Forward:
          ok = mb >= 0 && !has(d, kSync, st, -1) &&
               (st == 0 || (on(st - 1) == d ? has(d, kFwd, st - 1, mb) : has(d, kActIn, st, mb))) && put(d, kFwd, st, mb);
          break;
        case InstrKind::Backward:
          ok = mb >= 0 && !has(d, kSync, st, -1) && has(d, kFwd, st, mb) &&
               (st == s.stages - 1 || (on(st + 1) == d ? has(d, kBwd, st + 1, mb) : has(d, kGradIn, st, mb))) &&
               put(d, kBwd, st, mb);
          break;
        case InstrKind::AllReduceGrads:
          for (int m = 0; m < s.micro_batches; ++m) ok = ok && has(d, kBwd, st, m);
          ok = ok && put(d, kSync, st, -1);
          break;
        case InstrKind::OptimizerStep: ok = has(d, kSync, st, -1) && put(d, kStep, st, -1); break;
        case InstrKind::RecvActivation:
        case InstrKind::RecvGrad: continue;  // fired by the sender
        case InstrKind::SendActivation:
        case InstrKind::SendGrad: {
          const bool act = in.kind == InstrKind::SendActivation;
          const int to = in.peer_device, peer_stage = act ? st + 1 : st - 1;
          if (mb < 0 || peer_stage < 0 || peer_stage >= s.stages || to != on(peer_stage) || to == d) return false;
          if (!has(d, act ? kFwd : kBwd, st, mb)) return false;
          const Instr want{act ? InstrKind::RecvActivation : InstrKind::RecvGrad, peer_stage, mb, d};
          if (pc[to] == s.per_device[to].size() || !(s.per_device[to][pc[to]] == want)) continue;  // blocked
          ok = put(to, act ? kActIn : kGradIn, peer_stage, mb);
          ++pc[to];
          break;
        }
      }
      if (!ok) return false;
      ++pc[d];
      progress = true;
    }
  }
  for (int d = 0; d < s.devices; ++d)
    if (pc[d] != s.per_device[d].size()) return false;  // deadlock
  for (int st = 0; st < s.stages; ++st) {
    if (!has(on(st), kStep, st, -1)) return false;
    for (int mb = 0; mb < s.micro_batches; ++mb)
      if (!has(on(st), kFwd, st, mb) || !has(on(st), kBwd, st, mb)) return false;
  }
  return true;
}

}  // namespace

TEST(Schedule, GPipeAndOneFOneBPassWithTextbookMakespanAndBounds) {
  for (int D : {1, 2, 4}) {
    for (int M : {1, 2, 4, 8}) {
      for (int capacity : {0, 1}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " M=" + std::to_string(M) + " capacity=" + std::to_string(capacity));
        const Schedule g = gpipe(D, M), f = one_f_one_b(D, M);
        const ScheduleCheck gc = check_schedule(g, capacity), fc = check_schedule(f, capacity);
        ASSERT_TRUE(gc.ok) << gc.message << "\n" << to_text(g);
        ASSERT_TRUE(fc.ok) << fc.message << "\n" << to_text(f);
        // Every stage F = 1, B = 2: the last backward on device 0 ends at (M + D - 1) * 3 for both.
        EXPECT_EQ(gc.makespan, (M + D - 1) * 3);
        EXPECT_EQ(fc.makespan, (M + D - 1) * 3);
        EXPECT_NEAR(gc.bubble_fraction, analytic_bubble_fraction(D, 1, M), 1e-12);
        EXPECT_NEAR(fc.bubble_fraction, analytic_bubble_fraction(D, 1, M), 1e-12);
        for (int d = 0; d < D; ++d) {
          EXPECT_EQ(gc.peak_in_flight[d], M) << "device " << d;
          EXPECT_EQ(fc.peak_in_flight[d], std::min(D - d, M)) << "device " << d;
          EXPECT_EQ(gc.busy[d], 3 * M);
        }
      }
    }
  }
}

TEST(Schedule, InterleavedPassesWithMegatronsWarmupBound) {
  const int v = 2;
  for (int D : {2, 4}) {
    for (int M : {D, 2 * D, 4 * D}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " M=" + std::to_string(M));
      const Schedule s = interleaved_1f1b(D, v, M);
      EXPECT_EQ(s.stages, D * v);
      const ScheduleCheck buffered = check_schedule(s, 1), rendezvous = check_schedule(s, 0);
      ASSERT_TRUE(buffered.ok) << buffered.message << "\n" << to_text(s);
      ASSERT_TRUE(rendezvous.ok) << rendezvous.message << "\n" << to_text(s);
      // Each chunk takes F = 1, B = 2: the textbook (v * M + D - 1) * 3 with one-message buffers.
      EXPECT_EQ(buffered.makespan, (v * M + D - 1) * 3);
      EXPECT_NEAR(buffered.bubble_fraction, analytic_bubble_fraction(D, v, M), 1e-12);
      // Rendezvous can cost time: on 2 devices some messages have a one-unit window in which one of the two
      // devices is always mid-compute (measured 29 instead of 27 for M = 4, 57 instead of 51 for M = 8).
      EXPECT_GE(rendezvous.makespan, buffered.makespan);
      if (D == 4 || M == D) {
        EXPECT_EQ(rendezvous.makespan, buffered.makespan);
      }
      // Chunk-forwards in flight: Megatron's warmup + 1 (all v * M when M == D).
      for (int r = 0; r < D; ++r) {
        const int warmup = std::min((D - r - 1) * 2 + (v - 1) * D, v * M);
        EXPECT_EQ(buffered.peak_in_flight[r], M == D ? v * M : warmup + 1) << "device " << r;
      }
    }
  }
}

TEST(Schedule, InterleavedLaysChunksOutRoundRobinAndFollowsMegatronsOrder) {
  const Schedule s = interleaved_1f1b(2, 2, 4);
  // Device d holds stages d and d + 2; the first forwards on device 0 take micro-batches 0, 1 through
  // chunk 0, then through chunk 1 (Megatron's groups of D micro-batches).
  EXPECT_EQ(to_text(s, false),
            "interleaved_1f1b: 2 devices, 4 stages, 4 micro-batches\n"
            "d0: F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3 AR2 AR0 OPT0 OPT2\n"
            "d1: F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3 AR3 AR1 OPT1 OPT3\n");
}

TEST(Schedule, InterleavedRequiresMicroBatchesDivisibleByDevices) {
  try {
    interleaved_1f1b(4, 2, 6);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string msg = e.format();
    EXPECT_NE(msg.find("micro_batches (6) must be a multiple of the 4 pipeline devices"), std::string::npos) << msg;
    EXPECT_NE(msg.find("use 8 micro-batches"), std::string::npos) << msg;
  }
  EXPECT_THROW(gpipe(0, 4), UserError);
  EXPECT_THROW(one_f_one_b(2, 0), UserError);
  EXPECT_THROW(interleaved_1f1b(2, 0, 4), UserError);
}

TEST(Schedule, ConsecutiveStagesOnOneDeviceDoNotCommunicate) {
  const Schedule s = interleaved_1f1b(1, 3, 2);
  ASSERT_TRUE(check_schedule(s).ok) << check_schedule(s).message;
  EXPECT_TRUE(std::none_of(s.per_device[0].begin(), s.per_device[0].end(), is_comm)) << to_text(s);
  // Between devices: one activation and one gradient message per cross-device boundary and micro-batch.
  const Schedule t = interleaved_1f1b(2, 2, 4);
  size_t sends = 0;
  for (const auto& list : t.per_device)
    for (const Instr& in : list) sends += in.kind == InstrKind::SendActivation || in.kind == InstrKind::SendGrad;
  EXPECT_EQ(sends, 2u * 3 * 4);
}

TEST(Schedule, EveryDeviceEndsWithGradientSyncThenOptimizerStep) {
  for (const Schedule& s : {gpipe(4, 4), one_f_one_b(4, 8), interleaved_1f1b(2, 3, 4)}) {
    const int v = s.stages / s.devices;
    for (int d = 0; d < s.devices; ++d) {
      const auto& list = s.per_device[d];
      ASSERT_GE(list.size(), 2u * v);
      for (int c = 0; c < v; ++c) {
        EXPECT_EQ(list[list.size() - 2 * v + c].kind, InstrKind::AllReduceGrads) << to_text(s);
        EXPECT_EQ(list[list.size() - v + c], step(d + c * s.devices)) << to_text(s);
      }
    }
  }
}

TEST(Schedule, ToTextShowsOneRowPerDevice) {
  EXPECT_EQ(to_text(gpipe(2, 2)),
            "gpipe: 2 devices, 2 stages, 2 micro-batches\n"
            "d0: F0.0 Sa0.0>1 F0.1 Sa0.1>1 Rg0.0<1 B0.0 Rg0.1<1 B0.1 AR0 OPT0\n"
            "d1: Ra1.0<0 F1.0 Ra1.1<0 F1.1 B1.0 Sg1.0>0 B1.1 Sg1.1>0 AR1 OPT1\n");
  EXPECT_EQ(to_string(send_act(0, 1, 1)), "SendActivation(stage 0, mb 1, to device 1)");
  EXPECT_EQ(to_string(all_reduce(3)), "AllReduceGrads(stage 3)");
}

TEST(ScheduleCheck, SwappedSendAndRecvIsADeadlockNamingBothDevices) {
  Schedule s = one_f_one_b(2, 2);
  auto& d0 = s.per_device[0];
  const size_t i = position(d0, send_act(0, 1, 1)), j = position(d0, recv_grad(0, 0, 1));
  ASSERT_LT(i, j);
  // Device 0 now waits for a gradient before sending the activation that device 1 needs to produce it.
  std::swap(d0[i], d0[j]);
  const ScheduleCheck c = check_schedule(s);
  EXPECT_FALSE(c.ok);
  const size_t k = position(s.per_device[1], recv_act(1, 1, 0));
  const size_t g = position(s.per_device[1], send_grad(1, 0, 0));
  EXPECT_NE(c.message.find("deadlock"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("device 0 is stuck at instruction " + std::to_string(i) +
                           " RecvGrad(stage 0, mb 0, from device 1), waiting for device 1 to reach instruction " +
                           std::to_string(g) + " SendGrad(stage 1, mb 0, to device 0)"),
            std::string::npos)
      << c.message;
  EXPECT_NE(c.message.find("device 1 is stuck at instruction " + std::to_string(k) +
                           " RecvActivation(stage 1, mb 1, from device 0), waiting for device 0 to reach instruction " +
                           std::to_string(j) + " SendActivation(stage 0, mb 1, to device 1)"),
            std::string::npos)
      << c.message;
}

TEST(ScheduleCheck, DroppedRecvIsAMismatch) {
  Schedule s = one_f_one_b(2, 2);
  auto& d1 = s.per_device[1];
  d1.erase(d1.begin() + position(d1, recv_act(1, 1, 0)));
  const ScheduleCheck c = check_schedule(s);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.message.find("mismatch on channel device 0 -> device 1: 2 sends but 1 recvs; device 0 instruction " +
                           std::to_string(position(s.per_device[0], send_act(0, 1, 1))) +
                           " SendActivation(stage 0, mb 1, to device 1) is never received"),
            std::string::npos)
      << c.message;
  EXPECT_NE(c.message.find("Forward(stage 1, mb 1): runs before its input: no earlier RecvActivation(stage 1, mb 1)"),
            std::string::npos)
      << c.message;
}

TEST(ScheduleCheck, OutOfOrderMessagesOnAChannelAreAMismatch) {
  // Device 1 receives micro-batch 1 first while device 0 sends micro-batch 0 first.
  Schedule s{"hand", 2, 2, 2, {}};
  s.per_device = {
      {F(0, 0), send_act(0, 0, 1), F(0, 1), send_act(0, 1, 1), recv_grad(0, 0, 1), B(0, 0), recv_grad(0, 1, 1),
       B(0, 1), all_reduce(0), step(0)},
      {recv_act(1, 1, 0), recv_act(1, 0, 0), F(1, 0), B(1, 0), send_grad(1, 0, 0), F(1, 1), B(1, 1),
       send_grad(1, 1, 0), all_reduce(1), step(1)},
  };
  const ScheduleCheck c = check_schedule(s);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.message.find("mismatch on channel device 0 -> device 1, message 0: device 0 instruction 1 sends "
                           "SendActivation(stage 0, mb 0, to device 1) but device 1 instruction 0 receives "
                           "RecvActivation(stage 1, mb 1, from device 0)"),
            std::string::npos)
      << c.message;
}

TEST(ScheduleCheck, BoundedChannelsResolveARendezvousDeadlock) {
  // Device 0 sends both activations before receiving a gradient; device 1 sends the first gradient before
  // receiving the second activation. Both block on a send under rendezvous; one buffered message suffices.
  Schedule s{"naive", 2, 2, 2, {}};
  s.per_device = {
      {F(0, 0), send_act(0, 0, 1), F(0, 1), send_act(0, 1, 1), recv_grad(0, 0, 1), B(0, 0), recv_grad(0, 1, 1),
       B(0, 1), all_reduce(0), step(0)},
      {recv_act(1, 0, 0), F(1, 0), B(1, 0), send_grad(1, 0, 0), recv_act(1, 1, 0), F(1, 1), B(1, 1),
       send_grad(1, 1, 0), all_reduce(1), step(1)},
  };
  const ScheduleCheck rendezvous = check_schedule(s, 0);
  EXPECT_FALSE(rendezvous.ok);
  EXPECT_NE(rendezvous.message.find("deadlock (rendezvous channels):\n  device 0 is stuck at instruction 3 "
                                    "SendActivation(stage 0, mb 1, to device 1), waiting for device 1 to reach "
                                    "instruction 4 RecvActivation(stage 1, mb 1, from device 0)\n  device 1 is stuck "
                                    "at instruction 3 SendGrad(stage 1, mb 0, to device 0), waiting for device 0 to "
                                    "reach instruction 4 RecvGrad(stage 0, mb 0, from device 1)"),
            std::string::npos)
      << rendezvous.message;
  const ScheduleCheck buffered = check_schedule(s, 1);
  EXPECT_TRUE(buffered.ok) << buffered.message;
  // The compute order is 1f1b(2, 2)'s; only the communication order differs. Same 9 steps.
  EXPECT_EQ(buffered.makespan, 9);
  EXPECT_EQ(buffered.peak_in_flight, (std::vector<int>{2, 1}));
}

TEST(ScheduleCheck, ReportsOrderAndPlacementErrors) {
  auto problem = [](std::vector<std::vector<Instr>> lists, int stages = 2) {
    Schedule s{"hand", 2, stages, 1, std::move(lists)};
    const ScheduleCheck c = check_schedule(s);
    EXPECT_FALSE(c.ok);
    return c.message;
  };
  const std::vector<Instr> tail1 = {recv_act(1, 0, 0), F(1, 0), B(1, 0), send_grad(1, 0, 0), all_reduce(1), step(1)};
  // Backward before forward.
  EXPECT_NE(problem({{B(0, 0), F(0, 0), send_act(0, 0, 1), recv_grad(0, 0, 1), all_reduce(0), step(0)}, tail1})
                .find("device 0 instruction 0 Backward(stage 0, mb 0): runs before Forward(stage 0, mb 0)"),
            std::string::npos);
  // A forward twice, on the right device.
  EXPECT_NE(problem({{F(0, 0), F(0, 0), send_act(0, 0, 1), recv_grad(0, 0, 1), B(0, 0), all_reduce(0), step(0)}, tail1})
                .find("device 0 instruction 1 Forward(stage 0, mb 0): runs twice on this device (also instruction 0)"),
            std::string::npos);
  // A stage on the wrong device.
  EXPECT_NE(problem({{F(1, 0)}, {}}).find("device 0 instruction 0 Forward(stage 1, mb 0): stage 1 lives on device 1"),
            std::string::npos);
  // The optimizer before the gradient sync, and a backward that never runs.
  const std::string m = problem({{F(0, 0), send_act(0, 0, 1), recv_grad(0, 0, 1), step(0), all_reduce(0)}, tail1});
  EXPECT_NE(m.find("device 0 instruction 3 OptimizerStep(stage 0): runs before AllReduceGrads(stage 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("device 0 instruction 4 AllReduceGrads(stage 0): runs after only 0 of 1 backwards of its stage"),
            std::string::npos) << m;
  EXPECT_NE(m.find("Backward(stage 0, mb 0) never runs (device 0)"), std::string::npos) << m;
  // Send/recv between stages that share a device (interleaved layout on 2 devices: 4 stages, 1 and 3 on device 1).
  EXPECT_NE(problem({{}, {send_act(1, 0, 1)}}, 4).find("stage 2 lives on device 0"), std::string::npos);
  Schedule one{"hand", 1, 2, 1, {{F(0, 0), send_act(0, 0, 0)}}};
  EXPECT_NE(check_schedule(one).message.find("stages 0 and 1 are both on this device"), std::string::npos);
}

TEST(ScheduleCheck, AgreesWithAReferenceExecutionOnEveryMutant) {
  // Every single deletion and every swap of neighbouring instructions of three schedules: the checker
  // (rendezvous) accepts exactly the mutants that the head-matching reference runs to the end.
  int accepted = 0, rejected = 0;
  for (const Schedule& base : {gpipe(2, 3), one_f_one_b(3, 4), interleaved_1f1b(2, 2, 4)}) {
    ASSERT_TRUE(reference_runs(base));
    std::vector<Schedule> mutants;
    for (int d = 0; d < base.devices; ++d) {
      for (size_t i = 0; i < base.per_device[d].size(); ++i) {
        Schedule m = base;
        m.per_device[d].erase(m.per_device[d].begin() + i);
        mutants.push_back(std::move(m));
        if (i + 1 < base.per_device[d].size()) {
          Schedule w = base;
          std::swap(w.per_device[d][i], w.per_device[d][i + 1]);
          mutants.push_back(std::move(w));
        }
      }
    }
    for (const Schedule& m : mutants) {
      const ScheduleCheck c = check_schedule(m);
      ASSERT_EQ(c.ok, reference_runs(m)) << c.message << "\n" << to_text(m);
      (c.ok ? accepted : rejected)++;
    }
  }
  EXPECT_GT(accepted, 50);  // harmless reorderings exist (two independent steps) ...
  EXPECT_GT(rejected, 200);  // ... and most mutations break something
}

// stage_slots (what a plan runner gives each stage's executor) and SlotBook (how a step hands them out) agree:
// replaying every device's list never asks a stage for more slots than stage_slots counted, a micro-batch keeps
// its slot from its first instruction to its last, and every slot is free again at the end of the step.
TEST(Schedule, SlotBookNeverRunsOutOfTheCountedSlots) {
  for (const Schedule& s : {gpipe(3, 5), one_f_one_b(4, 6), interleaved_1f1b(2, 2, 4)}) {
    SCOPED_TRACE(s.name);
    const std::vector<int> slots = stage_slots(s);
    std::vector<SlotBook> books(static_cast<size_t>(s.stages));
    for (int st = 0; st < s.stages; ++st) books[static_cast<size_t>(st)].reset(st, slots[static_cast<size_t>(st)], s.micro_batches);
    for (const auto& list : s.per_device) {
      std::map<std::pair<int, int>, int> held;  // (stage, mb) -> slot
      for (const Instr& in : list) {
        if (in.micro_batch < 0) continue;
        SlotBook& b = books[static_cast<size_t>(in.stage)];
        const int slot = b.take(in.micro_batch);  // asserts when none is free
        auto [it, fresh] = held.emplace(std::make_pair(in.stage, in.micro_batch), slot);
        EXPECT_EQ(it->second, slot) << to_string(in);
        if (in.kind == InstrKind::SendGrad || (in.kind == InstrKind::Backward && in.stage == 0)) {
          b.release(in.micro_batch);
          held.erase(it);
        }
      }
      EXPECT_TRUE(held.empty());
    }
  }
}
