// Argument checks and output shapes shared by every communication backend. The checks build a message only
// when something is wrong, so a well-formed call allocates nothing.
#include "exec/comm/comm.h"

#include <algorithm>
#include <cstring>

namespace braid::exec {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

namespace {

bool axis_ok(const Shape& s, int axis) { return axis >= -s.rank() && axis < s.rank(); }

std::string bad_axis(const char* what, const char* name, const Tensor& t, int axis) {
  return BRAID_STR(what, ": ", name, " ", axis, " is out of range for ", t.desc().str());
}

// True when `out` equals `in` with dim a scaled by num/den (and, if b >= 0, dim b scaled by num2/den2).
bool shape_is(const Shape& out, const Shape& in, int a, int64_t num, int64_t den, int b = -1, int64_t num2 = 1,
              int64_t den2 = 1) {
  if (out.rank() != in.rank()) return false;
  for (int i = 0; i < in.rank(); ++i) {
    int64_t d = in[i];
    if (i == a) d = d / den * num;
    if (i == b) d = d / den2 * num2;
    if (out[i] != d) return false;
  }
  return true;
}

std::string check_reducible(const char* what, const Tensor& t, ReduceOp op) {
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::f64 && d != DType::i32 && d != DType::i64)
    return BRAID_STR(what, ": cannot reduce ", dtype_name(d), " (f32, f64, i32 and i64 can be reduced)");
  if (op == ReduceOp::Avg && !is_float(d))
    return BRAID_STR(what, ": avg of ", dtype_name(d), " is not defined (sum, then divide where wanted)");
  return {};
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.bytes() || !b.bytes()) return false;
  auto pa = static_cast<const char*>(a.raw()), pb = static_cast<const char*>(b.raw());
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

std::string check_defined(const char* what, const Tensor& t, const char* name) {
  if (t.defined()) return {};
  return BRAID_STR(what, ": ", name, " ", t.desc().str(), " has no memory");
}

}  // namespace

namespace comm_check {

std::string all_reduce(const Tensor& t, ReduceOp op, int /*n*/) {
  if (auto e = check_defined("all_reduce", t, "t"); !e.empty()) return e;
  return check_reducible("all_reduce", t, op);
}

std::string all_gather(const Tensor& in, const Tensor& out, int axis, int n) {
  if (auto e = check_defined("all_gather", in, "in"); !e.empty()) return e;
  if (auto e = check_defined("all_gather", out, "out"); !e.empty()) return e;
  if (!axis_ok(in.shape(), axis)) return bad_axis("all_gather", "axis", in, axis);
  if (out.dtype() != in.dtype() || !shape_is(out.shape(), in.shape(), in.shape().norm_axis(axis), n, 1))
    return BRAID_STR("all_gather: out is ", out.desc().str(), " but gathering ", in.desc().str(), " along axis ",
                     axis, " over ", n, " ranks gives ", all_gather_desc(in.desc(), axis, n).str());
  if (overlap(in, out)) return "all_gather: in and out overlap";
  return {};
}

std::string reduce_scatter(const Tensor& in, const Tensor& out, int axis, ReduceOp op, int n) {
  if (auto e = check_defined("reduce_scatter", in, "in"); !e.empty()) return e;
  if (auto e = check_defined("reduce_scatter", out, "out"); !e.empty()) return e;
  if (auto e = check_reducible("reduce_scatter", in, op); !e.empty()) return e;
  if (!axis_ok(in.shape(), axis)) return bad_axis("reduce_scatter", "axis", in, axis);
  const int a = in.shape().norm_axis(axis);
  if (in.shape()[a] % n != 0)
    return BRAID_STR("reduce_scatter: axis ", axis, " of ", in.desc().str(), " (", in.shape()[a],
                     ") is not divisible by the group size ", n);
  if (out.dtype() != in.dtype() || !shape_is(out.shape(), in.shape(), a, 1, n))
    return BRAID_STR("reduce_scatter: out is ", out.desc().str(), " but scattering ", in.desc().str(),
                     " along axis ", axis, " over ", n, " ranks gives ", reduce_scatter_desc(in.desc(), axis, n).str());
  if (overlap(in, out)) return "reduce_scatter: in and out overlap";
  return {};
}

std::string all_to_all(const Tensor& in, const Tensor& out, int split_axis, int concat_axis, int n) {
  if (auto e = check_defined("all_to_all", in, "in"); !e.empty()) return e;
  if (auto e = check_defined("all_to_all", out, "out"); !e.empty()) return e;
  if (!axis_ok(in.shape(), split_axis)) return bad_axis("all_to_all", "split_axis", in, split_axis);
  if (!axis_ok(in.shape(), concat_axis)) return bad_axis("all_to_all", "concat_axis", in, concat_axis);
  const int a = in.shape().norm_axis(split_axis), c = in.shape().norm_axis(concat_axis);
  if (in.shape()[a] % n != 0)
    return BRAID_STR("all_to_all: split axis ", split_axis, " of ", in.desc().str(), " (", in.shape()[a],
                     ") is not divisible by the group size ", n);
  bool ok = out.dtype() == in.dtype();
  if (ok && a == c) ok = out.shape() == in.shape();
  else if (ok) ok = shape_is(out.shape(), in.shape(), a, 1, n, c, n, 1);
  if (!ok)
    return BRAID_STR("all_to_all: out is ", out.desc().str(), " but splitting ", in.desc().str(), " along axis ",
                     split_axis, " and concatenating along axis ", concat_axis, " over ", n, " ranks gives ",
                     all_to_all_desc(in.desc(), split_axis, concat_axis, n).str());
  if (overlap(in, out)) return "all_to_all: in and out overlap";
  return {};
}

std::string broadcast(const Tensor& t, int root, int n) {
  if (auto e = check_defined("broadcast", t, "t"); !e.empty()) return e;
  if (root < 0 || root >= n) return BRAID_STR("broadcast: root ", root, " is not a rank of a group of ", n);
  return {};
}

std::string reduce(const Tensor& t, int root, ReduceOp op, int n) {
  if (auto e = check_defined("reduce", t, "t"); !e.empty()) return e;
  if (root < 0 || root >= n) return BRAID_STR("reduce: root ", root, " is not a rank of a group of ", n);
  return check_reducible("reduce", t, op);
}

std::string peer(const char* what, int peer, int n) {
  if (peer < 0 || peer >= n) return BRAID_STR(what, ": peer ", peer, " is not a rank of a group of ", n);
  return {};
}

std::string split(const std::vector<int>& ranks, int rank, int n) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n)
      return BRAID_STR("split [", list, "]: ", ranks[i], " is not a rank of a group of ", n);
    if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1)
      return BRAID_STR("split [", list, "]: rank ", ranks[i], " is listed twice");
  }
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end())
    return BRAID_STR("split [", list, "]: called by rank ", rank, ", which is not in the list");
  return {};
}

}  // namespace comm_check

TensorDesc all_gather_desc(const TensorDesc& in, int axis, int n) {
  TensorDesc d = in;
  d.shape[in.shape.norm_axis(axis)] *= n;
  return d;
}

TensorDesc reduce_scatter_desc(const TensorDesc& in, int axis, int n) {
  TensorDesc d = in;
  d.shape[in.shape.norm_axis(axis)] /= n;
  return d;
}

TensorDesc all_to_all_desc(const TensorDesc& in, int split_axis, int concat_axis, int n) {
  TensorDesc d = in;
  d.shape[in.shape.norm_axis(split_axis)] /= n;
  d.shape[in.shape.norm_axis(concat_axis)] *= n;
  return d;
}

namespace {
class Borrowed final : public Communicator {
 public:
  explicit Borrowed(Communicator& t) : t_(t) {}
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override { t_.all_reduce(t, op); }
  void do_all_gather(const Tensor& in, Tensor& out, int axis) override { t_.all_gather(in, out, axis); }
  void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) override {
    t_.reduce_scatter(in, out, axis, op);
  }
  void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) override {
    t_.all_to_all(in, out, split_axis, concat_axis);
  }
  void do_broadcast(Tensor& t, int root) override { t_.broadcast(t, root); }
  void do_reduce(Tensor& t, int root, ReduceOp op) override { t_.reduce(t, root, op); }
  void do_barrier() override { t_.barrier(); }
  void do_send(const Tensor& t, int peer, int tag) override { t_.send(t, peer, tag); }
  void do_recv(Tensor& t, int peer, int tag) override { t_.recv(t, peer, tag); }
  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override { return t_.split(ranks); }
  void do_abort(const std::string& reason) override { t_.abort(reason); }

 private:
  Communicator& t_;
};
}  // namespace

std::unique_ptr<Communicator> borrow(Communicator& target) { return std::make_unique<Borrowed>(target); }

}  // namespace braid::exec
