// The TCP communicator's collectives (see tcp_comm.h), built from rounds over the transport's mesh.
// A round: every rank sends one frame to every other rank and receives one from each. The first round of
// every collective carries each rank's signature of the call, so every rank learns what every other rank
// called and all of them raise the same error on a mismatch or a bad argument (the group stays usable: the
// round's frames have all been consumed). All-reduce: round 0 sends chunk j (a contiguous numel/n share) to
// rank j, and rank j folds the n copies of its chunk in rank order; round 1 sends each folded chunk to every
// rank. That moves 2(n-1)/n of the tensor per rank, as a ring does, and keeps the rank-order fold.
#include "distributed/tcp_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "exec/comm/reduce.h"
#include "distributed/tcp_transport.h"

namespace braid::dist {

using detail::Clock;
using detail::FrameKind;
using detail::Mesh;
using detail::Posted;
using detail::Process;
using exec::ReduceOp;

namespace {

struct Span {
  const std::byte* data = nullptr;
  uint64_t bytes = 0;
};
struct MutSpan {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
};

std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.raw()); }

// Elements before, at and after axis a: the tensor seen as (outer, len, inner).
struct Around {
  int64_t outer = 1, len = 1, inner = 1;
};
Around around(const Shape& s, int a) {
  Around r;
  for (int i = 0; i < s.rank(); ++i) (i < a ? r.outer : i == a ? r.len : r.inner) *= s[i];
  return r;
}

// Slice k of n along axis a of t, packed contiguously into dst.
void pack_slice(const Tensor& t, int a, int k, int n, std::byte* dst) {
  const Around s = around(t.shape(), a);
  const int64_t part = s.len / n, es = static_cast<int64_t>(dtype_size(t.dtype())), run = part * s.inner * es;
  for (int64_t o = 0; o < s.outer; ++o)
    if (run) std::memcpy(dst + o * run, bytes_of(t) + (o * s.len + k * part) * s.inner * es, static_cast<size_t>(run));
}

// src (out's shape with [a] / n) into block j of n along axis a of out.
void place_block(const Tensor& out, int a, int j, int n, const std::byte* src) {
  const Around s = around(out.shape(), a);
  const int64_t part = s.len / n, es = static_cast<int64_t>(dtype_size(out.dtype())), run = part * s.inner * es;
  for (int64_t o = 0; o < s.outer; ++o)
    if (run) std::memcpy(bytes_of(out) + (o * s.len + j * part) * s.inner * es, src + o * run, static_cast<size_t>(run));
}

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

class TcpComm final : public exec::Communicator {
 public:
  explicit TcpComm(std::shared_ptr<Mesh> mesh) : mesh_(std::move(mesh)) {}

  int rank() const override { return mesh_->rank; }
  int size() const override { return mesh_->size(); }

  TcpCommStats stats() const {
    TcpCommStats s;
    for (const auto& p : mesh_->peers) {
      s.shm_send_peers += p && p->out_ring ? 1 : 0;
      s.shm_recv_peers += p && p->in_ring ? 1 : 0;
      s.direct_send_peers += p && p->out_ring && p->out_direct && mesh_->proc->options.shm_direct ? 1 : 0;
    }
    s.shm_bytes_sent = mesh_->ring_bytes_sent.load();
    s.direct_bytes_sent = mesh_->direct_bytes_sent.load();
    s.socket_bytes_sent = mesh_->socket_bytes_sent.load();
    return s;
  }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    const char* what = "all_reduce";
    live(what);
    const int n = size(), r = rank();
    const std::string err = exec::comm_check::all_reduce(t, op, n);
    const std::string sig = err.empty() ? BRAID_STR(what, "(", t.desc().str(), ", ", exec::reduce_op_name(op), ")") : "!" + err;
    const int64_t es = err.empty() ? static_cast<int64_t>(dtype_size(t.dtype())) : 0;
    auto begin = [&](int j) { return err.empty() ? t.numel() * j / n : 0; };
    const int64_t mine = begin(r + 1) - begin(r);
    const int64_t ch0 = next_channel();
    // Large tensors: pipelined (the choice depends only on what the signature fixes, so ranks that agree
    // on the call agree on the path; ranks that do not both send round 0 alike and raise the mismatch).
    // Only when each chunk has at least 2 segments: with one, nothing overlaps that the short path does
    // not already overlap, and the sender thread's start and hand-offs are pure cost.
    if (err.empty() && n > 1 && t.bytes() >= kPipelineMinSegments * kSegmentBytes * static_cast<uint64_t>(n))
      return all_reduce_pipelined(t, op, sig, ch0);
    // Round 0: chunk j of this rank's tensor to rank j; the copies of chunk r from every rank into scratch.
    scratch_.resize(static_cast<size_t>(std::max<int64_t>(mine * es * n, 1)));
    std::vector<Span> out(static_cast<size_t>(n));
    std::vector<MutSpan> in(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      out[j] = {bytes_of(t) + begin(j) * es, static_cast<uint64_t>((begin(j + 1) - begin(j)) * es)};
      in[j] = {scratch_.data() + j * mine * es, static_cast<uint64_t>(mine * es)};
    }
    Round r0 = post(ch0, in);
    send(what, ch0, sig, out, &r0);
    // Round 1's destinations are the other chunks of t, whose round-0 bytes have left: post them now, so
    // that a fast peer's reply lands in place instead of in a buffer.
    std::vector<MutSpan> in1(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) in1[j] = {bytes_of(t) + begin(j) * es, static_cast<uint64_t>((begin(j + 1) - begin(j)) * es)};
    Round r1 = post(ch0 + 1, err.empty() ? in1 : std::vector<MutSpan>(static_cast<size_t>(n)));
    try {
      finish(what, r0, sig);
    } catch (...) {
      cancel(r1);
      throw;
    }
    // 2. Fold chunk r in rank order (this rank's own copy is read in place), 3. send it to everyone.
    std::vector<const std::byte*> src(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) src[j] = j == r ? bytes_of(t) + begin(r) * es : scratch_.data() + j * mine * es;
    exec::fold(t.dtype(), op, bytes_of(t) + begin(r) * es, src.data(), n, mine);
    const Span folded{bytes_of(t) + begin(r) * es, static_cast<uint64_t>(mine * es)};
    send(what, ch0 + 1, sig, std::vector<Span>(static_cast<size_t>(n), folded), &r1);
    finish(what, r1, sig);
  }

  // The pipelined all-reduce: the same rounds and the same fold, split into segments along each chunk so
  // that three threads work at once: a sender thread writes round 0 (one frame per peer, as the short
  // path) and then each folded segment to every peer (a frame per segment), the receiver thread files
  // every frame in place, and this thread folds segment k as soon as every peer's copy of it has arrived.
  // Round 1's destinations are posted up front: peer j's folded segment k of chunk j overwrites exactly
  // the bytes this rank sent j as segment k of round 0, which j had to receive whole before folding.
  void all_reduce_pipelined(Tensor& t, ReduceOp op, const std::string& sig, int64_t ch0) {
    const char* what = "all_reduce";
    const int n = size(), r = rank();
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
    auto begin = [&](int j) { return t.numel() * j / n; };
    auto chunk = [&](int j) { return bytes_of(t) + begin(j) * es; };
    const int64_t mine = begin(r + 1) - begin(r);
    const int64_t seg = std::max<int64_t>(static_cast<int64_t>(kSegmentBytes) / es, 1);  // elements per segment
    auto segs = [&](int j) { return (begin(j + 1) - begin(j) + seg - 1) / seg; };
    scratch_.resize(static_cast<size_t>(std::max<int64_t>(mine * es * n, 1)));
    std::vector<Span> out(static_cast<size_t>(n));
    std::vector<MutSpan> in(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      out[j] = {chunk(j), static_cast<uint64_t>((begin(j + 1) - begin(j)) * es)};
      in[j] = {scratch_.data() + j * mine * es, static_cast<uint64_t>(mine * es)};
    }
    Round r0 = post(ch0, in);
    // Round 1: segment k of chunk j from rank j, on channel ch0 + 1 + k, in place.
    std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);  // index of (j, 0) in r1
    for (int j = 0; j < n; ++j) first[j + 1] = first[j] + (j == r ? 0 : segs(j));
    std::vector<Posted> r1(static_cast<size_t>(first[n]));
    std::vector<std::pair<detail::Key, Posted*>> e1;
    e1.reserve(r1.size());
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const int64_t len = begin(j + 1) - begin(j);
      for (int64_t k = 0; k < segs(j); ++k) {
        Posted& p = r1[static_cast<size_t>(first[j] + k)];
        p.data = chunk(j) + k * seg * es;
        p.bytes = static_cast<uint64_t>((std::min(len, (k + 1) * seg) - k * seg) * es);
        e1.push_back({detail::Key{j, FrameKind::Coll, ch0 + 1 + k}, &p});
      }
    }
    for (auto& [key, p] : e1) mesh_->post(key, *p);
    auto cancel1 = [&] {
      for (auto& [key, p] : e1)
        if (!p->done) mesh_->unpost(key, *p);
    };

    // The sender thread. `folded` (segments of chunk r ready) and `stop` are guarded by smu.
    std::mutex smu;
    std::condition_variable scv;
    int64_t folded = 0;
    bool stop = false;
    std::string send_error;
    const int64_t nseg = (mine + seg - 1) / seg;
    std::thread sender([&] {
      std::vector<Mesh::Out> outs;
      for (int j = 0; j < n; ++j)
        if (j != r) outs.push_back({j, FrameKind::Coll, ch0, sig, out[j].data, out[j].bytes});
      std::string e = mesh_->write(outs, deadline());
      for (int64_t k = 0; e.empty() && k < nseg; ++k) {
        {
          std::unique_lock lk(smu);
          if (!scv.wait_until(lk, deadline(), [&] { return stop || folded > k; })) e = "timed out waiting for its own fold";
          if (stop) return;
        }
        if (!e.empty()) break;
        const std::byte* p = chunk(r) + k * seg * es;
        const uint64_t b = static_cast<uint64_t>((std::min(mine, (k + 1) * seg) - k * seg) * es);
        for (auto& o : outs) {
          o.channel = ch0 + 1 + k;
          o.data = p;
          o.bytes = b;
        }
        e = mesh_->write(outs, deadline());
      }
      if (!e.empty()) {
        {
          std::lock_guard lk(smu);
          send_error = BRAID_STR(at(what), ": ", e);
        }
        mesh_->proc->abort(send_error);  // wakes this rank's waits; the peers stop waiting for this one
      }
    });
    auto stop_sender = [&] {
      {
        std::lock_guard lk(smu);
        stop = true;
      }
      scv.notify_all();
      sender.join();
    };
    auto failed = [&](const std::string& e) {  // abort first (unblocks the sender), then join, then throw
      const std::string msg = BRAID_STR(at(what), ": ", e);
      mesh_->proc->abort(msg);
      cancel1();
      stop_sender();
      throw CommError(msg);
    };

    // Every peer's round-0 header (its signature): a mismatch is raised as on the short path, after
    // consuming round 0 and before a byte of round 1 is sent.
    if (auto e = mesh_->await(r0.entries, [](const Posted& p) { return p.header; }, deadline()); !e.empty()) failed(e);
    bool agree = true;
    for (auto& [key, p] : r0.entries) agree = agree && p->sig == sig && p->size_ok;
    if (!agree) {
      stop_sender();
      cancel1();
      if (!send_error.empty()) throw CommError(send_error);
      finish(what, r0, sig);  // raises the mismatch on every rank
      fail(BRAID_STR(at(what), ": the ranks disagree on the call"));  // not reached
    }
    std::vector<const std::byte*> src(static_cast<size_t>(n));
    for (int64_t k = 0; k < nseg; ++k) {
      const int64_t s0 = k * seg, s1 = std::min(mine, s0 + seg);
      const uint64_t need = static_cast<uint64_t>(s1 * es);
      if (auto e = mesh_->await(r0.entries, [need](const Posted& p) { return p.got >= need; }, deadline()); !e.empty())
        failed(e);
      for (int j = 0; j < n; ++j) src[j] = (j == r ? chunk(r) : scratch_.data() + j * mine * es) + s0 * es;
      exec::fold(t.dtype(), op, chunk(r) + s0 * es, src.data(), n, s1 - s0);
      {
        std::lock_guard lk(smu);
        folded = k + 1;
      }
      scv.notify_all();
    }
    if (auto e = mesh_->take(r0.entries, deadline()); !e.empty()) failed(e);
    if (auto e = mesh_->take(e1, deadline()); !e.empty()) failed(e);
    sender.join();  // it has written every segment (or failed, and aborted)
    if (!send_error.empty()) throw CommError(send_error);
    for (auto& [key, p] : e1)
      if (!p->size_ok || p->sig != sig)
        fail(BRAID_STR(at(what), ": rank ", std::get<0>(key), " sent a round-1 segment of another size or call"));
  }

  void do_all_gather(const Tensor& in, Tensor& out, int axis) override {
    const char* what = "all_gather";
    live(what);
    const int n = size(), r = rank();
    const std::string err = exec::comm_check::all_gather(in, out, axis, n);
    const int a = err.empty() ? in.shape().norm_axis(axis) : 0;
    const std::string sig = err.empty() ? BRAID_STR(what, "(", in.desc().str(), ", axis ", a, ")") : "!" + err;
    const uint64_t b = err.empty() ? in.bytes() : 0;
    scratch_.resize(std::max<size_t>(b * static_cast<size_t>(n), 1));
    std::vector<Span> o(static_cast<size_t>(n), Span{bytes_of(in), b});
    std::vector<MutSpan> i(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) i[j] = {scratch_.data() + j * b, b};
    const int64_t ch = next_channel();
    Round r0 = post(ch, i);
    send(what, ch, sig, o, &r0);
    finish(what, r0, sig);
    for (int j = 0; j < n; ++j) place_block(out, a, j, n, j == r ? bytes_of(in) : scratch_.data() + j * b);
  }

  // One round in which rank j receives slice j of every rank's `in` (n slices of b bytes along axis a): this
  // rank's slices packed into pack_ (slice j at j * b), every rank's slice for this rank landing in scratch_
  // (rank j's at j * b; this rank's own stays in pack_). Shared by reduce_scatter and all_to_all.
  void exchange_slices(const char* what, const std::string& sig, const Tensor& in, int a, uint64_t b) {
    const int n = size();
    pack_.resize(std::max<size_t>(b * static_cast<size_t>(n), 1));
    scratch_.resize(std::max<size_t>(b * static_cast<size_t>(n), 1));
    std::vector<Span> o(static_cast<size_t>(n));
    std::vector<MutSpan> i(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      if (b) pack_slice(in, a, j, n, pack_.data() + j * b);
      o[j] = {pack_.data() + j * b, b};
      i[j] = {scratch_.data() + j * b, b};
    }
    const int64_t ch = next_channel();
    Round r0 = post(ch, i);
    send(what, ch, sig, o, &r0);
    finish(what, r0, sig);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) override {
    const char* what = "reduce_scatter";
    live(what);
    const int n = size(), r = rank();
    const std::string err = exec::comm_check::reduce_scatter(in, out, axis, op, n);
    const int a = err.empty() ? in.shape().norm_axis(axis) : 0;
    const std::string sig = err.empty() ? BRAID_STR(what, "(", in.desc().str(), ", axis ", a, ", ",
                                                    exec::reduce_op_name(op), ")")
                                        : "!" + err;
    const uint64_t b = err.empty() ? out.bytes() : 0;  // one slice
    exchange_slices(what, sig, in, a, b);
    std::vector<const std::byte*> src(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) src[j] = j == r ? pack_.data() + r * b : scratch_.data() + j * b;
    exec::fold(in.dtype(), op, bytes_of(out), src.data(), n, out.numel());
  }

  void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) override {
    const char* what = "all_to_all";
    live(what);
    const int n = size(), r = rank();
    const std::string err = exec::comm_check::all_to_all(in, out, split_axis, concat_axis, n);
    const int a = err.empty() ? in.shape().norm_axis(split_axis) : 0;
    const int c = err.empty() ? in.shape().norm_axis(concat_axis) : 0;
    const std::string sig =
        err.empty() ? BRAID_STR(what, "(", in.desc().str(), ", split axis ", a, ", concat axis ", c, ")") : "!" + err;
    const uint64_t b = err.empty() ? in.bytes() / static_cast<uint64_t>(n) : 0;  // one chunk
    exchange_slices(what, sig, in, a, b);
    for (int j = 0; j < n; ++j) place_block(out, c, j, n, j == r ? pack_.data() + r * b : scratch_.data() + j * b);
  }

  void do_broadcast(Tensor& t, int root) override {
    const char* what = "broadcast";
    live(what);
    const int n = size(), r = rank();
    const std::string err = exec::comm_check::broadcast(t, root, n);
    const std::string sig = err.empty() ? BRAID_STR(what, "(", t.desc().str(), ", root ", root, ")") : "!" + err;
    std::vector<Span> o(static_cast<size_t>(n));
    std::vector<MutSpan> i(static_cast<size_t>(n));
    if (err.empty() && r == root) o.assign(static_cast<size_t>(n), Span{bytes_of(t), t.bytes()});
    if (err.empty() && r != root) i[static_cast<size_t>(root)] = {bytes_of(t), t.bytes()};
    const int64_t ch = next_channel();
    Round r0 = post(ch, i);
    send(what, ch, sig, o, &r0);
    finish(what, r0, sig);
  }

  void do_barrier() override {
    const char* what = "barrier";
    live(what);
    const int n = size();
    const int64_t ch = next_channel();
    Round r0 = post(ch, std::vector<MutSpan>(static_cast<size_t>(n)));
    send(what, ch, "barrier()", std::vector<Span>(static_cast<size_t>(n)), &r0);
    finish(what, r0, "barrier()");
  }

  void do_send(const Tensor& t, int peer, int tag) override {
    check_local("send", exec::comm_check::peer("send", peer, size()), t);
    live("send");
    if (peer == rank()) {  // to itself: straight into its own mailbox, bounded like any other
      if (auto e = mesh_->send_to_self(tag, t.desc().str(), bytes_of(t), t.bytes(), deadline()); !e.empty())
        lost(BRAID_STR(p2p("send", rank(), peer, tag), ": ", e));
      return;
    }
    const std::string e = mesh_->write({{peer, FrameKind::P2P, tag, t.desc().str(), bytes_of(t), t.bytes()}}, deadline());
    if (!e.empty()) lost(BRAID_STR(p2p("send", rank(), peer, tag), ": ", e));
  }

  void do_recv(Tensor& t, int peer, int tag) override {
    check_local("recv", exec::comm_check::peer("recv", peer, size()), t);
    live("recv");
    Posted p;
    p.data = bytes_of(t);
    p.bytes = t.bytes();
    const detail::Key key{peer, FrameKind::P2P, tag};
    mesh_->post(key, p);
    if (auto e = mesh_->take({{key, &p}}, deadline()); !e.empty()) lost(BRAID_STR(p2p("recv", peer, rank(), tag), ": ", e));
    if (!p.size_ok || p.sig != t.desc().str())
      fail(BRAID_STR(p2p("recv", peer, rank(), tag), ": rank ", rank(), " expects ", t.desc().str(), " but rank ",
                     peer, " sent ", p.sig));
  }

  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    if (auto e = exec::comm_check::split(ranks, rank(), size()); !e.empty())
      throw InternalError(BRAID_STR("tcp on group ", mesh_->name, ": ", e));
    live("split");
    Process& proc = *mesh_->proc;
    std::vector<int> wr;
    for (int r : ranks) wr.push_back(mesh_->world_ranks[static_cast<size_t>(r)]);
    std::vector<int> sorted = wr;
    std::sort(sorted.begin(), sorted.end());
    int k;
    {
      std::lock_guard lk(proc.mu);
      k = proc.split_count[sorted]++;
    }
    std::string gid = "g";
    for (int w : sorted) gid += BRAID_STR(w, ".");
    gid += BRAID_STR("k", k);
    // Every member must list the ranks in the same order: compare through the store before connecting. A
    // connection of this split's own: splits made concurrently on other threads must not queue behind its waits.
    std::unique_ptr<StoreClient> own;
    try {
      StoreClientOptions so;
      so.connect_timeout = proc.options.connect_timeout;
      own = proc.store->clone(so);
    } catch (const StoreError& e) {
      lost(BRAID_STR("tcp split at world rank ", proc.world_rank, ": ", e.what()));
    }
    StoreClient& store = *own;
    const std::string order_key = BRAID_STR(proc.options.key_prefix, "/", gid, "/order/");
    const std::string mine = list_str(wr);
    try {
      store.set(order_key + std::to_string(proc.world_rank), mine);
      for (int w : sorted) {
        if (w == proc.world_rank) continue;
        const std::string theirs = store.wait_get(order_key + std::to_string(w), proc.options.connect_timeout);
        if (theirs != mine)
          throw InternalError(BRAID_STR("tcp split: world rank ", proc.world_rank, " lists the group as ", mine,
                                        " but world rank ", w, " listed it as ", theirs,
                                        " (every member must pass the same ranks in the same order)"));
      }
    } catch (const StoreError& e) {
      lost(BRAID_STR("tcp split ", mine, " at world rank ", proc.world_rank, ": ", e.what()));
    }
    auto m = std::make_shared<Mesh>();
    m->proc = mesh_->proc;
    m->world_ranks = wr;
    m->name = mine;
    m->rank = static_cast<int>(std::find(wr.begin(), wr.end(), proc.world_rank) - wr.begin());
    m->connect(gid, store);
    return std::make_unique<TcpComm>(std::move(m));
  }

  void do_abort(const std::string& reason) override {
    mesh_->proc->abort(BRAID_STR("aborted by world rank ", mesh_->proc->world_rank, ": ", reason));
  }

 private:
  struct Round {
    int64_t channel = 0;
    std::vector<Posted> posted;
    std::vector<std::pair<detail::Key, Posted*>> entries;
  };

  // Each collective owns 2^24 channels: all-reduce's round 1 uses one per segment.
  int64_t next_channel() { return (seq_++) << 24; }
  static constexpr uint64_t kSegmentBytes = uint64_t{1} << 20;
  static constexpr uint64_t kPipelineMinSegments = 2;  // per chunk
  Clock::time_point deadline() const { return Clock::now() + mesh_->proc->options.timeout; }
  std::string at(const char* what) const { return BRAID_STR("tcp ", what, " at rank ", rank(), " of group ", mesh_->name); }
  std::string p2p(const char* what, int src, int dst, int tag) const {
    return BRAID_STR("tcp ", what, " from rank ", src, " to rank ", dst, " tag ", tag, " on group ", mesh_->name);
  }

  void live(const char* what) {
    if (mesh_->proc->aborted) throw CommError(BRAID_STR(at(what), ": the world was aborted: ", mesh_->proc->reason()));
  }

  void check_local(const char* what, std::string error, const Tensor& t) {
    if (error.empty() && !t.defined()) error = BRAID_STR(what, ": tensor ", t.desc().str(), " has no memory");
    if (!error.empty()) throw InternalError(BRAID_STR("tcp on group ", mesh_->name, " at rank ", rank(), ": ", error));
  }

  // A failure that leaves the group inconsistent: abort (so that the peers stop waiting), then throw. fail: the
  // ranks broke the protocol (a bug); lost: a wait or write failed (a peer gone, a timeout, an abort).
  [[noreturn]] void fail(const std::string& msg) {
    mesh_->proc->abort(msg);
    throw InternalError(msg);
  }
  [[noreturn]] void lost(const std::string& msg) {
    mesh_->proc->abort(msg);
    throw CommError(msg);
  }

  Round post(int64_t channel, const std::vector<MutSpan>& in) {
    Round rd;
    rd.channel = channel;
    rd.posted.resize(in.size());
    for (int j = 0; j < size(); ++j) {
      if (j == rank()) continue;
      Posted& p = rd.posted[static_cast<size_t>(j)];
      p.data = in[static_cast<size_t>(j)].data;
      p.bytes = in[static_cast<size_t>(j)].bytes;
      rd.entries.push_back({detail::Key{j, FrameKind::Coll, channel}, &p});
    }
    for (auto& [key, p] : rd.entries) mesh_->post(key, *p);
    return rd;
  }

  void cancel(Round& rd) {
    for (auto& [key, p] : rd.entries)
      if (!p->done) mesh_->unpost(key, *p);
  }

  void send(const char* what, int64_t channel, const std::string& sig, const std::vector<Span>& out, Round* rd) {
    std::vector<Mesh::Out> outs;
    for (int j = 0; j < size(); ++j)
      if (j != rank()) outs.push_back({j, FrameKind::Coll, channel, sig, out[j].data, out[j].bytes});
    if (auto e = mesh_->write(outs, deadline()); !e.empty()) {
      cancel(*rd);
      lost(BRAID_STR(at(what), ": ", e));
    }
  }

  // Waits for the round's frames, then compares every rank's signature with this rank's: the same error,
  // listing every rank, is raised on every rank when they differ.
  void finish(const char* what, Round& rd, const std::string& sig) {
    if (auto e = mesh_->take(rd.entries, deadline()); !e.empty()) lost(BRAID_STR(at(what), ": ", e));
    const int n = size();
    auto sig_of = [&](int j) -> const std::string& { return j == rank() ? sig : rd.posted[static_cast<size_t>(j)].sig; };
    std::string errors, calls;
    bool same = true;
    for (int j = 0; j < n; ++j) {
      const std::string& s = sig_of(j);
      if (!s.empty() && s[0] == '!') errors += BRAID_STR("\n  rank ", j, ": ", s.substr(1));
      same = same && s == sig;
      calls += BRAID_STR("\n  rank ", j, " calls ", s.empty() || s[0] != '!' ? s : std::string(what) + "(invalid)");
    }
    if (!errors.empty())
      throw InternalError(BRAID_STR("tcp ", what, " on group ", mesh_->name, ": invalid arguments:", errors));
    if (!same) throw InternalError(BRAID_STR("tcp collective on group ", mesh_->name, ": the ranks called different collectives:", calls));
    for (auto& [key, p] : rd.entries)
      if (!p->size_ok)
        fail(BRAID_STR(at(what), ": rank ", std::get<0>(key), " sent ", p->bytes, " bytes less or more than expected"));
  }

  std::shared_ptr<Mesh> mesh_;
  int64_t seq_ = 0;
  std::vector<std::byte> scratch_, pack_;  // grow to the largest call, reused
};

}  // namespace

TcpCommStats tcp_comm_stats(const exec::Communicator& comm) {
  const auto* c = dynamic_cast<const TcpComm*>(&comm);
  if (!c) throw InternalError("tcp_comm_stats: not a TCP communicator");
  return c->stats();
}

std::unique_ptr<exec::Communicator> make_tcp_world(std::shared_ptr<StoreClient> store, int rank, int size,
                                                   TcpCommOptions options) {
  BRAID_ASSERT(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " of a TCP world of ", size);
  if (const char* v = std::getenv("BRAID_DIST_SHM"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1" && s != "ring")
      throw UserError({}, BRAID_STR("BRAID_DIST_SHM='", s, "': expected 0, 1 or ring"),
                      "0: sockets only; 1 (the default): shared memory between ranks of one host; ring: its rings, "
                      "without reading the sender's memory");
    options.shm = options.shm && s != "0";
    options.shm_direct = options.shm_direct && s == "1";
  }
  BRAID_ASSERT(options.timeout.count() > 0 && options.mailbox_capacity >= 1, "bad TCP communicator options");
  auto proc = std::make_shared<Process>();
  proc->store = std::move(store);
  proc->options = options;
  proc->world_rank = rank;
  const std::string secret_key = options.key_prefix + "/secret";
  try {
    if (rank == 0) {
      proc->secret = generate_token();
      proc->store->set(secret_key, proc->secret);
    } else {
      proc->secret = proc->store->wait_get(secret_key, options.connect_timeout);
    }
  } catch (const StoreError& e) {
    throw CommError(BRAID_STR("tcp world: rank ", rank, " of ", size, ": ", e.what()));
  }
  auto mesh = std::make_shared<Mesh>();
  mesh->proc = proc;
  for (int r = 0; r < size; ++r) mesh->world_ranks.push_back(r);
  mesh->name = list_str(mesh->world_ranks);
  mesh->rank = rank;
  mesh->connect("world", *mesh->proc->store);
  return std::make_unique<TcpComm>(std::move(mesh));
}

}  // namespace braid::dist
