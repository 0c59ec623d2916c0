// host_staged (staged_comm.h).
#include "backends/cuda/staged_comm.h"

#include <utility>

namespace braid::exec {
namespace {

class HostStagedComm final : public Communicator {
 public:
  HostStagedComm(std::unique_ptr<Communicator> host, cuda::Stream& stream) : host_(std::move(host)), stream_(stream) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

 protected:
  Tensor down(const Tensor& t) {
    Tensor h = Tensor::empty(t.desc());
    stream_.download(h.raw(), t.raw(), t.bytes());  // synchronises
    return h;
  }
  void up(const Tensor& t, const Tensor& h) {
    stream_.upload(t.raw(), h.raw(), t.bytes());
    stream_.synchronize();
  }
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    Tensor h = down(t);
    host_->all_reduce(h, op);
    up(t, h);
  }
  void do_all_gather(const Tensor& in, Tensor& out, int axis) override {
    Tensor hi = down(in), ho = Tensor::empty(out.desc());
    host_->all_gather(hi, ho, axis);
    up(out, ho);
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) override {
    Tensor hi = down(in), ho = Tensor::empty(out.desc());
    host_->reduce_scatter(hi, ho, axis, op);
    up(out, ho);
  }
  void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) override {
    Tensor hi = down(in), ho = Tensor::empty(out.desc());
    host_->all_to_all(hi, ho, split_axis, concat_axis);
    up(out, ho);
  }
  void do_broadcast(Tensor& t, int root) override {
    Tensor h = down(t);
    host_->broadcast(h, root);
    up(t, h);
  }
  void do_reduce(Tensor& t, int root, ReduceOp op) override {
    Tensor h = down(t);
    host_->reduce(h, root, op);
    up(t, h);
  }
  void do_barrier() override { host_->barrier(); }
  void do_send(const Tensor& t, int peer, int tag) override { host_->send(down(t), peer, tag); }
  void do_recv(Tensor& t, int peer, int tag) override {
    Tensor h = Tensor::empty(t.desc());
    host_->recv(h, peer, tag);
    up(t, h);
  }
  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    return std::make_unique<HostStagedComm>(host_->split(ranks), stream_);
  }
  void do_abort(const std::string& reason) override { host_->abort(reason); }

 private:
  std::unique_ptr<Communicator> host_;
  cuda::Stream& stream_;
};

}  // namespace

std::unique_ptr<Communicator> host_staged(std::unique_ptr<Communicator> host, cuda::Stream& stream) {
  return std::make_unique<HostStagedComm>(std::move(host), stream);
}

}  // namespace braid::exec
