// The in-process backend (see inproc.h). A collective publishes this rank's arguments in its group slot and
// meets the others at a barrier; the last rank to arrive checks that every rank called the same collective
// with well-formed arguments, so a mismatch fails on every rank at once. Then each rank moves data directly
// between the ranks' tensors and meets them again before returning, so no rank reads a tensor its owner has
// been given back. Reductions fold in rank order; nothing depends on thread timing. No allocation happens
// on the success path after a mailbox's first use.
#include "exec/comm/inproc.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "exec/comm/reduce.h"

namespace braid::exec {

namespace detail {

enum class OpKind : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce, Barrier };

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::Barrier: return "barrier";
  }
  return "?";
}

// One rank's arguments to the collective in progress; fields a kind does not use stay at their defaults.
struct Slot {
  OpKind kind = OpKind::Barrier;
  ReduceOp op = ReduceOp::Sum;
  int axis = 0, axis2 = 0, root = 0;  // axes normalised
  const Tensor* in = nullptr;
  const Tensor* out = nullptr;
  std::string error;  // this rank's argument error ("" when well formed)
};

struct Item {
  TensorDesc desc;
  std::vector<std::byte> bytes;  // grows to the largest message seen, never shrinks
};

// Messages from one rank to another under one tag: a ring of `capacity` items, one producer, one consumer.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Item> ring;
  int head = 0, count = 0;
};

struct InProcState;

struct Group {
  InProcState* world = nullptr;
  std::vector<int> world_ranks;  // group rank i is world rank world_ranks[i]
  std::string name;              // "[0, 2]" (world ranks)
  int size() const { return static_cast<int>(world_ranks.size()); }

  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;  // barriers completed
  int arrived = 0;
  std::vector<char> present;         // arrived at the current barrier
  std::vector<const char*> phase;    // where each rank last arrived (for timeout messages)
  std::vector<Slot> slots;
  std::string verdict;               // the error found by the last rank to arrive ("" if none)
  std::map<std::tuple<int, int, int>, std::unique_ptr<Mailbox>> mailboxes;  // (src, dst, tag)
};

struct InProcState {
  int size = 0;
  InProcOptions options;
  std::atomic<bool> aborted{false};

  std::mutex mu;  // guards everything below
  std::string abort_reason;
  std::vector<std::shared_ptr<Group>> groups;
  std::map<std::pair<std::vector<int>, int>, std::shared_ptr<Group>> splits;  // (sorted world ranks, k)
  std::vector<std::map<std::vector<int>, int>> split_count;                   // per world rank
  std::vector<char> handed_out;

  std::shared_ptr<Group> make_group(std::vector<int> world_ranks) {  // call with mu held
    auto g = std::make_shared<Group>();
    g->world = this;
    g->world_ranks = std::move(world_ranks);
    g->name = "[";
    for (size_t i = 0; i < g->world_ranks.size(); ++i)
      g->name += (i ? ", " : "") + std::to_string(g->world_ranks[i]);
    g->name += "]";
    g->present.assign(g->world_ranks.size(), 0);
    g->phase.assign(g->world_ranks.size(), "");
    g->slots.resize(g->world_ranks.size());
    groups.push_back(g);
    return g;
  }

  void abort(const std::string& reason) {
    std::vector<std::shared_ptr<Group>> gs;
    {
      std::lock_guard lk(mu);
      if (aborted) return;  // the first reason is the cause; later ones are its consequences
      abort_reason = reason;
      aborted = true;
      gs = groups;
    }
    // Waiters check `aborted` under their own mutex, so taking it before notifying loses no wake-up.
    for (auto& g : gs) {
      std::vector<Mailbox*> boxes;
      {
        std::lock_guard lk(g->mu);
        g->cv.notify_all();
        for (auto& [key, mb] : g->mailboxes) boxes.push_back(mb.get());
      }
      for (Mailbox* mb : boxes) {
        std::lock_guard lk(mb->mu);
        mb->cv.notify_all();
      }
    }
  }

  std::string reason() {
    std::lock_guard lk(mu);
    return abort_reason;
  }
};

}  // namespace detail

namespace {

using detail::Group;
using detail::InProcState;
using detail::Mailbox;
using detail::OpKind;
using detail::Slot;

double seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

// Elements before, at and after axis a: the tensor seen as (outer, len, inner).
struct Around {
  int64_t outer = 1, len = 1, inner = 1;
};
Around around(const Shape& s, int a) {
  Around r;
  for (int i = 0; i < s.rank(); ++i) (i < a ? r.outer : i == a ? r.len : r.inner) *= s[i];
  return r;
}
int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= s[i];
  return p;
}

void copy_bytes(std::byte* dst, const std::byte* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

bool overlap(const Tensor* a, const Tensor* b) {
  if (!a || !b || !a->bytes() || !b->bytes()) return false;
  auto pa = static_cast<const char*>(a->raw()), pb = static_cast<const char*>(b->raw());
  return pa < pb + b->bytes() && pb < pa + a->bytes();
}

std::string describe(const Slot& s) {
  std::string d = BRAID_STR(detail::op_kind_name(s.kind), "(");
  if (s.in) d += s.in->desc().str();
  switch (s.kind) {
    case OpKind::AllReduce: d += BRAID_STR(", ", reduce_op_name(s.op)); break;
    case OpKind::AllGather: d += BRAID_STR(", axis ", s.axis); break;
    case OpKind::ReduceScatter: d += BRAID_STR(", axis ", s.axis, ", ", reduce_op_name(s.op)); break;
    case OpKind::AllToAll: d += BRAID_STR(", split axis ", s.axis, ", concat axis ", s.axis2); break;
    case OpKind::Broadcast: d += BRAID_STR(", root ", s.root); break;
    case OpKind::Reduce: d += BRAID_STR(", root ", s.root, ", ", reduce_op_name(s.op)); break;
    case OpKind::Barrier: break;
  }
  return d + ")";
}

bool same_call(const Slot& a, const Slot& b) {
  if (a.kind != b.kind || a.op != b.op || a.axis != b.axis || a.axis2 != b.axis2 || a.root != b.root) return false;
  if (!a.in || !b.in) return a.in == b.in;
  return a.in->desc() == b.in->desc();
}

// Run by the last rank to arrive at a collective's first barrier, with every rank's arguments alive.
std::string check_slots(const Group& g) {
  const int n = g.size();
  const char* what = detail::op_kind_name(g.slots[0].kind);
  std::string errors;
  for (int r = 0; r < n; ++r)
    if (!g.slots[r].error.empty()) errors += BRAID_STR("\n  rank ", r, ": ", g.slots[r].error);
  if (!errors.empty()) return BRAID_STR("inproc ", what, " on group ", g.name, ": invalid arguments:", errors);
  bool same = true;
  for (int r = 1; r < n; ++r) same = same && same_call(g.slots[0], g.slots[r]);
  if (!same) {
    std::string calls;
    for (int r = 0; r < n; ++r) calls += BRAID_STR("\n  rank ", r, " calls ", describe(g.slots[r]));
    return BRAID_STR("inproc collective on group ", g.name, ": the ranks called different collectives:", calls);
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const Slot &a = g.slots[i], &b = g.slots[j];
      if (overlap(a.out, b.in) || overlap(a.out, b.out))
        return BRAID_STR("inproc ", what, " on group ", g.name, ": rank ", i, "'s output shares memory with rank ",
                         j, "'s tensors");
    }
  return {};
}

class InProcComm final : public Communicator {
 public:
  InProcComm(std::shared_ptr<InProcState> world, std::shared_ptr<Group> group, int rank)
      : world_(std::move(world)), group_(std::move(group)), rank_(rank), ptrs_(group_->world_ranks.size()) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    publish(OpKind::AllReduce, op, 0, 0, 0, &t, &t, comm_check::all_reduce(t, op, size()));
    arrive("all_reduce", true);
    // 1. Each rank folds its own contiguous chunk of every rank's tensor into its own tensor (nobody else
    //    reads that chunk of this rank's tensor); 2. each rank copies the other chunks from their owners.
    const int n = size();
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
    auto begin = [&](int r) { return t.numel() * r / n; };
    for (int j = 0; j < n; ++j) ptrs_[j] = bytes_of(*group_->slots[j].out) + begin(rank_) * es;
    fold(t.dtype(), op, bytes_of(t) + begin(rank_) * es, ptrs_.data(), n, begin(rank_ + 1) - begin(rank_));
    arrive("all_reduce (chunks reduced)", false);
    for (int j = 0; j < n; ++j) {
      if (j == rank_) continue;
      const int64_t off = begin(j) * es;
      copy_bytes(bytes_of(t) + off, bytes_of(*group_->slots[j].out) + off, (begin(j + 1) - begin(j)) * es);
    }
    arrive("all_reduce (chunks copied)", false);
  }

  void do_all_gather(const Tensor& in, Tensor& out, int axis) override {
    publish(OpKind::AllGather, ReduceOp::Sum, in.shape().norm_axis(axis), 0, 0, &in, &out,
            comm_check::all_gather(in, out, axis, size()));
    arrive("all_gather", true);
    const int n = size();
    const Around s = around(in.shape(), group_->slots[rank_].axis);
    const int64_t block = s.len * s.inner * static_cast<int64_t>(dtype_size(in.dtype()));
    for (int j = 0; j < n; ++j) {
      const std::byte* src = bytes_of(*group_->slots[j].in);
      for (int64_t o = 0; o < s.outer; ++o) copy_bytes(bytes_of(out) + (o * n + j) * block, src + o * block, block);
    }
    arrive("all_gather (copied)", false);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) override {
    publish(OpKind::ReduceScatter, op, in.shape().norm_axis(axis), 0, 0, &in, &out,
            comm_check::reduce_scatter(in, out, axis, op, size()));
    arrive("reduce_scatter", true);
    const int n = size();
    const Around s = around(in.shape(), group_->slots[rank_].axis);
    const int64_t part = s.len / n, es = static_cast<int64_t>(dtype_size(in.dtype()));
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int j = 0; j < n; ++j)
        ptrs_[j] = bytes_of(*group_->slots[j].in) + ((o * s.len + rank_ * part) * s.inner) * es;
      fold(in.dtype(), op, bytes_of(out) + o * part * s.inner * es, ptrs_.data(), n, part * s.inner);
    }
    arrive("reduce_scatter (reduced)", false);
  }

  void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) override {
    const Shape& sh = in.shape();
    publish(OpKind::AllToAll, ReduceOp::Sum, sh.norm_axis(split_axis), sh.norm_axis(concat_axis), 0, &in, &out,
            comm_check::all_to_all(in, out, split_axis, concat_axis, size()));
    arrive("all_to_all", true);
    const int n = size(), a = group_->slots[rank_].axis, c = group_->slots[rank_].axis2;
    const int64_t es = static_cast<int64_t>(dtype_size(in.dtype()));
    // Rank r takes chunk r (along a) of every rank j's input and puts it at position j along c.
    for (int j = 0; j < n; ++j) {
      const std::byte* src = bytes_of(*group_->slots[j].in);
      std::byte* dst = bytes_of(out);
      if (a == c) {
        const Around s = around(sh, a);
        const int64_t part = s.len / n, run = part * s.inner * es;
        for (int64_t o = 0; o < s.outer; ++o)
          copy_bytes(dst + (o * s.len + j * part) * s.inner * es, src + (o * s.len + rank_ * part) * s.inner * es, run);
        continue;
      }
      // The tensor as (P, x, Q, y, W) with x = min(a, c), y = max(a, c).
      const int x = std::min(a, c), y = std::max(a, c);
      const int64_t P = prod(sh, 0, x), Q = prod(sh, x + 1, y), W = prod(sh, y + 1, sh.rank());
      const int64_t sx = sh[x], sy = sh[y];
      if (a < c) {  // split x, concat y: runs of sy * W elements
        const int64_t pa = sx / n, run = sy * W * es;
        for (int64_t p = 0; p < P; ++p)
          for (int64_t i = 0; i < pa; ++i)
            for (int64_t q = 0; q < Q; ++q)
              copy_bytes(dst + (((p * pa + i) * Q + q) * sy * n + j * sy) * W * es,
                   src + (((p * sx + rank_ * pa + i) * Q + q) * sy) * W * es, run);
      } else {  // concat x, split y: runs of (sy / n) * W elements
        const int64_t pa = sy / n, run = pa * W * es;
        for (int64_t p = 0; p < P; ++p)
          for (int64_t k = 0; k < sx; ++k)
            for (int64_t q = 0; q < Q; ++q)
              copy_bytes(dst + (((p * sx * n + j * sx + k) * Q + q) * pa) * W * es,
                   src + (((p * sx + k) * Q + q) * sy + rank_ * pa) * W * es, run);
      }
    }
    arrive("all_to_all (copied)", false);
  }

  void do_broadcast(Tensor& t, int root) override {
    publish(OpKind::Broadcast, ReduceOp::Sum, 0, 0, root, &t, &t, comm_check::broadcast(t, root, size()));
    arrive("broadcast", true);
    if (rank_ != root) copy_bytes(bytes_of(t), bytes_of(*group_->slots[root].in), static_cast<int64_t>(t.bytes()));
    arrive("broadcast (copied)", false);
  }

  // all_reduce's first half, into root's tensor: each rank folds its own chunk of every rank's tensor into root's.
  void do_reduce(Tensor& t, int root, ReduceOp op) override {
    publish(OpKind::Reduce, op, 0, 0, root, &t, &t, comm_check::reduce(t, root, op, size()));
    arrive("reduce", true);
    const int n = size();
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
    const int64_t b = t.numel() * rank_ / n, e = t.numel() * (rank_ + 1) / n;
    for (int j = 0; j < n; ++j) ptrs_[j] = bytes_of(*group_->slots[j].out) + b * es;
    fold(t.dtype(), op, bytes_of(*group_->slots[root].out) + b * es, ptrs_.data(), n, e - b);
    arrive("reduce (chunks reduced)", false);
  }

  void do_barrier() override {
    publish(OpKind::Barrier, ReduceOp::Sum, 0, 0, 0, nullptr, nullptr, {});
    arrive("barrier", true);
  }

  void do_send(const Tensor& t, int peer, int tag) override {
    check_local("send", comm_check::peer("send", peer, size()), t);
    Mailbox& mb = mailbox(rank_, peer, tag);
    const int cap = static_cast<int>(mb.ring.size());
    std::unique_lock lk(mb.mu);
    if (!mb.cv.wait_until(lk, deadline(), [&] { return mb.count < cap || world_->aborted; })) {
      const std::string msg = BRAID_STR(p2p("send", rank_, peer, tag), ": timed out after ", seconds(timeout()),
                                        " s: the mailbox is full (capacity ", cap, ") and rank ", peer,
                                        " has not received from it");
      lk.unlock();
      fail(msg);
    }
    if (world_->aborted) {
      lk.unlock();
      fail_aborted(p2p("send", rank_, peer, tag));
    }
    detail::Item& it = mb.ring[static_cast<size_t>((mb.head + mb.count) % cap)];
    it.desc = t.desc();
    it.bytes.resize(t.bytes());
    copy_bytes(it.bytes.data(), static_cast<const std::byte*>(t.raw()), static_cast<int64_t>(t.bytes()));
    ++mb.count;
    mb.cv.notify_all();
  }

  void do_recv(Tensor& t, int peer, int tag) override {
    check_local("recv", comm_check::peer("recv", peer, size()), t);
    Mailbox& mb = mailbox(peer, rank_, tag);
    const int cap = static_cast<int>(mb.ring.size());
    std::unique_lock lk(mb.mu);
    if (!mb.cv.wait_until(lk, deadline(), [&] { return mb.count > 0 || world_->aborted; })) {
      const std::string msg = BRAID_STR(p2p("recv", peer, rank_, tag), ": timed out after ", seconds(timeout()),
                                        " s: rank ", peer, " sent nothing");
      lk.unlock();
      fail(msg);
    }
    if (world_->aborted) {
      lk.unlock();
      fail_aborted(p2p("recv", peer, rank_, tag));
    }
    detail::Item& it = mb.ring[static_cast<size_t>(mb.head)];
    if (it.desc != t.desc()) {
      const std::string msg = BRAID_STR(p2p("recv", peer, rank_, tag), ": rank ", rank_, " expects ",
                                        t.desc().str(), " but rank ", peer, " sent ", it.desc.str());
      lk.unlock();
      fail(msg);
    }
    copy_bytes(bytes_of(t), it.bytes.data(), static_cast<int64_t>(t.bytes()));
    mb.head = (mb.head + 1) % cap;
    --mb.count;
    mb.cv.notify_all();
  }

  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    if (auto e = comm_check::split(ranks, rank_, size()); !e.empty())
      throw InternalError(BRAID_STR("inproc on group ", group_->name, ": ", e));
    std::vector<int> wr;
    for (int r : ranks) wr.push_back(group_->world_ranks[static_cast<size_t>(r)]);
    std::vector<int> sorted = wr;
    std::sort(sorted.begin(), sorted.end());
    const int me = group_->world_ranks[static_cast<size_t>(rank_)];
    std::shared_ptr<Group> g;
    {
      std::lock_guard lk(world_->mu);
      const int k = world_->split_count[static_cast<size_t>(me)][sorted]++;
      auto& slot = world_->splits[{sorted, k}];
      if (!slot) slot = world_->make_group(wr);
      g = slot;
    }
    if (g->world_ranks != wr) {
      std::string mine = "[";
      for (size_t i = 0; i < wr.size(); ++i) mine += (i ? ", " : "") + std::to_string(wr[i]);
      throw InternalError(BRAID_STR("inproc split: world rank ", me, " lists the group as ", mine,
                                    "] but another member listed it as ", g->name,
                                    " (every member must pass the same ranks in the same order)"));
    }
    const int new_rank = static_cast<int>(std::find(wr.begin(), wr.end(), me) - wr.begin());
    return std::make_unique<InProcComm>(world_, g, new_rank);
  }

  void do_abort(const std::string& reason) override {
    world_->abort(BRAID_STR("aborted by world rank ", group_->world_ranks[static_cast<size_t>(rank_)], ": ", reason));
  }

 private:
  static std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.raw()); }
  std::chrono::milliseconds timeout() const { return world_->options.timeout; }
  std::chrono::steady_clock::time_point deadline() const { return std::chrono::steady_clock::now() + timeout(); }

  void publish(OpKind kind, ReduceOp op, int axis, int axis2, int root, const Tensor* in, const Tensor* out,
               std::string error) {
    Slot& s = group_->slots[static_cast<size_t>(rank_)];  // only this rank writes it, between barriers
    s.kind = kind;
    s.op = op;
    s.axis = axis;
    s.axis2 = axis2;
    s.root = root;
    s.in = in;
    s.out = out;
    s.error = std::move(error);
  }

  // Meets every rank of the group. With `check`, the last rank to arrive validates the published slots and
  // every rank throws the same error if they disagree.
  void arrive(const char* what, bool check) {
    Group& g = *group_;
    std::unique_lock lk(g.mu);
    if (world_->aborted) {
      lk.unlock();
      fail_aborted(at(what));
    }
    const uint64_t gen = g.generation;
    g.present[static_cast<size_t>(rank_)] = 1;
    g.phase[static_cast<size_t>(rank_)] = what;
    if (++g.arrived == g.size()) {
      if (check) g.verdict = check_slots(g);
      else g.verdict.clear();
      g.arrived = 0;
      std::fill(g.present.begin(), g.present.end(), 0);
      ++g.generation;
      g.cv.notify_all();
    } else if (!g.cv.wait_until(lk, deadline(), [&] { return g.generation != gen || world_->aborted; })) {
      std::string missing, arrived;
      for (int r = 0; r < g.size(); ++r) {
        const size_t i = static_cast<size_t>(r);
        if (g.present[i]) arrived += BRAID_STR(arrived.empty() ? "" : ", ", "rank ", r, " in ", g.phase[i]);
        else missing += BRAID_STR(missing.empty() ? "" : ", ", r);
      }
      const std::string msg = BRAID_STR(at(what), ": timed out after ", seconds(timeout()), " s (barrier ",
                                        gen, " of this group) waiting for ranks [", missing, "]; arrived: ", arrived);
      lk.unlock();
      fail(msg);
    } else if (g.generation == gen) {
      lk.unlock();
      fail_aborted(at(what));
    }
    if (!g.verdict.empty()) {  // stable until this rank arrives again
      const std::string v = g.verdict;
      lk.unlock();
      throw InternalError(v);
    }
  }

  std::string at(const char* what) const {
    return BRAID_STR("inproc ", what, " at rank ", rank_, " of group ", group_->name);
  }
  std::string p2p(const char* what, int src, int dst, int tag) const {
    return BRAID_STR("inproc ", what, " from rank ", src, " to rank ", dst, " tag ", tag, " on group ", group_->name);
  }

  void check_local(const char* what, std::string error, const Tensor& t) {
    if (error.empty() && !t.defined()) error = BRAID_STR(what, ": tensor ", t.desc().str(), " has no memory");
    if (!error.empty())
      throw InternalError(BRAID_STR("inproc on group ", group_->name, " at rank ", rank_, ": ", error));
  }

  // A failure that leaves the world inconsistent: abort it (so the other ranks stop waiting), then throw.
  [[noreturn]] void fail(const std::string& msg) {
    world_->abort(msg);
    throw InternalError(msg);
  }
  [[noreturn]] void fail_aborted(const std::string& where) {
    throw InternalError(BRAID_STR(where, ": the world was aborted: ", world_->reason()));
  }

  Mailbox& mailbox(int src, int dst, int tag) {
    std::lock_guard lk(group_->mu);
    auto& mb = group_->mailboxes[{src, dst, tag}];
    if (!mb) {
      mb = std::make_unique<Mailbox>();
      mb->ring.resize(static_cast<size_t>(world_->options.mailbox_capacity));
    }
    return *mb;
  }

  std::shared_ptr<InProcState> world_;
  std::shared_ptr<Group> group_;
  int rank_;
  std::vector<const std::byte*> ptrs_;  // per-rank source pointers of a fold
};

}  // namespace

InProcWorld::InProcWorld(int size, InProcOptions options) : state_(std::make_shared<InProcState>()) {
  BRAID_ASSERT(size >= 1, "an in-process world needs at least one rank, not ", size);
  BRAID_ASSERT(options.mailbox_capacity >= 1, "mailbox capacity must be at least 1, not ", options.mailbox_capacity);
  BRAID_ASSERT(options.timeout.count() > 0, "the communication timeout must be positive");
  state_->size = size;
  state_->options = options;
  state_->split_count.resize(static_cast<size_t>(size));
  state_->handed_out.assign(static_cast<size_t>(size), 0);
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
  std::lock_guard lk(state_->mu);
  state_->make_group(std::move(all));
}

InProcWorld::~InProcWorld() = default;

int InProcWorld::size() const { return state_->size; }

std::unique_ptr<Communicator> InProcWorld::communicator(int rank) {
  std::lock_guard lk(state_->mu);
  BRAID_ASSERT(rank >= 0 && rank < state_->size, "rank ", rank, " of an in-process world of ", state_->size);
  BRAID_ASSERT(!state_->handed_out[static_cast<size_t>(rank)], "the communicator of rank ", rank,
               " was already handed out");
  state_->handed_out[static_cast<size_t>(rank)] = 1;
  return std::make_unique<InProcComm>(state_, state_->groups.front(), rank);
}

void InProcWorld::abort(const std::string& reason) { state_->abort(BRAID_STR("aborted: ", reason)); }

}  // namespace braid::exec
