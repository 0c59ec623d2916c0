// The communication interface: one Communicator per rank of a group of ranks; collectives, point-to-point
// messages and sub-groups over braid::Tensor. Backends (in-process threads here; TCP and NCCL later) fit
// behind it unchanged: nothing in it assumes threads, shared memory or a device kind.
// Invariants every backend honours (docs/communication.md): reductions are bit-identical on every rank;
// outputs are preallocated by the caller with the exact shape (a Communicator never allocates a result).
// It deliberately has no asynchronous calls yet: every call returns when this rank's part is complete.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace braid::exec {

// Avg is Sum followed by one division by the group size, in the tensor's dtype (floating dtypes only).
enum class ReduceOp : uint8_t { Sum, Prod, Min, Max, Avg };
std::string_view reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank's index in the group, 0 <= rank() < size().
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Collectives: every rank of the group calls the same collective, in the same order, with tensors of the
  // same dtype and shape (mismatches are reported, naming the ranks). Axes may be negative (-1 = last).

  // t <- op over ranks 0..n-1 of t, element-wise, folded in rank order:
  // ((t_0 op t_1) op t_2) ... op t_{n-1}, in t's dtype. Identical bits on every rank.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) { do_all_reduce(t, op); }
  // out = concatenation of every rank's in along axis, rank 0 first; out.shape[axis] = n * in.shape[axis].
  void all_gather(const Tensor& in, Tensor& out, int axis) { do_all_gather(in, out, axis); }
  // out = slice `rank` of all_reduce(in) along axis (in.shape[axis] divisible by n), bit-identical to it.
  void reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op = ReduceOp::Sum) {
    do_reduce_scatter(in, out, axis, op);
  }
  // in is cut into n equal chunks along split_axis; chunk j goes to rank j; each rank concatenates what it
  // receives along concat_axis in rank order. out.shape = in.shape with [split_axis] / n, then [concat_axis] * n.
  void all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) {
    do_all_to_all(in, out, split_axis, concat_axis);
  }
  // Every rank's t <- root's t.
  void broadcast(Tensor& t, int root) { do_broadcast(t, root); }
  // root's t <- op over ranks of t, the same bits all_reduce gives; the other ranks' t is left unspecified (their
  // bytes may be used as scratch). What ZeRO-2's gradient shards take: half an all-reduce's traffic. Backends
  // without a reduce of their own all-reduce.
  void reduce(Tensor& t, int root, ReduceOp op = ReduceOp::Sum) { do_reduce(t, root, op); }
  // Returns once every rank of the group has called it.
  void barrier() { do_barrier(); }

  // Point to point: messages from one rank to a peer with the same tag arrive in the order sent; tags are
  // independent of each other. send returns once t may be reused (its bytes are buffered or delivered);
  // it blocks while the backend's buffer for (this rank, peer, tag) is full. recv's t must have the
  // message's dtype and shape.
  void send(const Tensor& t, int peer, int tag) { do_send(t, peer, tag); }
  void recv(Tensor& t, int peer, int tag) { do_recv(t, peer, tag); }

  // A sub-group of the listed ranks (ranks of this communicator; distinct; the caller among them), numbered
  // in the list's order: the new group's rank i is ranks[i]. Called by exactly the listed ranks, each with
  // the same list; splitting the same ranks again makes another, independent group.
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks) { return do_split(ranks); }

  // Makes every pending and later operation on every rank connected to this one fail with `reason`
  // (an InternalError). For a worker that failed, so that its peers stop waiting for it.
  void abort(const std::string& reason) { do_abort(reason); }

 protected:
  virtual void do_all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void do_all_gather(const Tensor& in, Tensor& out, int axis) = 0;
  virtual void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) = 0;
  virtual void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) = 0;
  virtual void do_broadcast(Tensor& t, int root) = 0;
  virtual void do_reduce(Tensor& t, int /*root*/, ReduceOp op) { do_all_reduce(t, op); }
  virtual void do_barrier() = 0;
  virtual void do_send(const Tensor& t, int peer, int tag) = 0;
  virtual void do_recv(Tensor& t, int peer, int tag) = 0;
  virtual std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) = 0;
  virtual void do_abort(const std::string& reason) = 0;
};

// Local argument checks shared by every backend. Each returns "" when the call is well formed on this rank,
// else a message naming the operation, the tensors and what is wrong.
namespace comm_check {
std::string all_reduce(const Tensor& t, ReduceOp op, int n);
std::string all_gather(const Tensor& in, const Tensor& out, int axis, int n);
std::string reduce_scatter(const Tensor& in, const Tensor& out, int axis, ReduceOp op, int n);
std::string all_to_all(const Tensor& in, const Tensor& out, int split_axis, int concat_axis, int n);
std::string broadcast(const Tensor& t, int root, int n);
std::string reduce(const Tensor& t, int root, ReduceOp op, int n);
std::string peer(const char* what, int peer, int n);
std::string split(const std::vector<int>& ranks, int rank, int n);
}  // namespace comm_check

// A communicator that forwards every call to `target` (which must outlive it): for handing a communicator owned
// elsewhere (a process's TCP world, owned by its dist::Job) to code that takes ownership of one.
std::unique_ptr<Communicator> borrow(Communicator& target);

// The output descriptions the collectives require (for callers that allocate outputs).
TensorDesc all_gather_desc(const TensorDesc& in, int axis, int n);
TensorDesc reduce_scatter_desc(const TensorDesc& in, int axis, int n);
TensorDesc all_to_all_desc(const TensorDesc& in, int split_axis, int concat_axis, int n);

}  // namespace braid::exec
