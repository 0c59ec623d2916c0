// NcclWorld and NcclCommunicator (see nccl_comm.h). Collectives along an axis other than 0 pack or unpack
// the chunks with 2-D copies through the rank's scratch buffer (allocated once, at construction).
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "backends/cuda/nccl_comm.h"
#include "backends/cuda/kernels/check.h"

#define BRAID_NCCL_CHECK(call)                                                                      \
  do {                                                                                              \
    ncclResult_t braid_r_ = (call);                                                                 \
    if (braid_r_ != ncclSuccess)                                                                    \
      ::braid::cuda::detail::fail("NCCL", #call, ncclGetErrorString(braid_r_), __FILE__, __LINE__); \
  } while (0)

namespace braid::exec {
namespace detail {

struct NcclState {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  NcclOptions options;
  std::mutex mu;
  bool aborted = false;
  std::string reason;
  // split(): the unique id of each (ranks, n-th split of those ranks), made by the first member to arrive.
  std::map<std::pair<std::vector<int>, int>, ncclUniqueId> split_ids;
  // Several processes (NcclWorld::join): the job's host world, over which split()s share their ids.
  exec::Communicator* host = nullptr;
};

}  // namespace detail

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

void require(const std::string& err) {
  if (!err.empty()) throw InternalError("nccl: " + err);
}

// (outer, chunk bytes) of chunk views along `axis` of a tensor cut into `parts`.
struct ChunkGeom {
  size_t outer = 1, chunk = 0;
};
ChunkGeom geom(const Tensor& whole, int axis, int parts) {
  const Shape& s = whole.shape();
  int ax = s.norm_axis(axis);
  ChunkGeom g;
  size_t inner = 1;
  for (int a = 0; a < ax; ++a) g.outer *= static_cast<size_t>(s[a]);
  for (int a = ax + 1; a < s.rank(); ++a) inner *= static_cast<size_t>(s[a]);
  g.chunk = static_cast<size_t>(s[ax] / parts) * inner * dtype_size(whole.dtype());
  return g;
}

// Rank 0's NCCL unique id to every rank of `host` (its bytes as 32-bit integers through a broadcast).
void share_id(Communicator& host, ncclUniqueId& id) {
  static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is whole 32-bit words");
  Tensor t = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(sizeof(ncclUniqueId) / 4)}, DType::i32});
  if (host.rank() == 0) std::memcpy(t.raw(), &id, sizeof id);
  host.broadcast(t, 0);
  std::memcpy(&id, t.raw(), sizeof id);
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<detail::NcclState> st, int rank, ncclComm_t comm, int device, int size)
      : st_(std::move(st)), rank_(rank), size_(size), device_(device), comm_(comm) {
    BRAID_CUDA_CHECK(cudaSetDevice(device_));
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BRAID_CUDA_CHECK(cudaMalloc(&scratch_, st_->options.scratch_bytes + 256));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    if (owns_comm_ && comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    require(comm_check::all_reduce(t, op, size_));
    enter();
    BRAID_NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                                   comm_, stream_));
    wait("all_reduce");
  }
  void do_all_gather(const Tensor& in, Tensor& out, int axis) override {
    require(comm_check::all_gather(in, out, axis, size_));
    enter();
    ChunkGeom g = geom(out, axis, size_);
    void* dst = g.outer == 1 ? out.raw() : scratch(in.bytes() * static_cast<size_t>(size_), "all_gather");
    BRAID_NCCL_CHECK(ncclAllGather(in.raw(), dst, static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_, stream_));
    if (g.outer != 1)  // scratch holds rank-major blocks; chunk r goes to column block r of every out row
      for (int r = 0; r < size_; ++r)
        copy2d(static_cast<char*>(out.raw()) + static_cast<size_t>(r) * g.chunk, g.chunk * static_cast<size_t>(size_),
               static_cast<char*>(dst) + static_cast<size_t>(r) * in.bytes(), g.chunk, g.chunk, g.outer);
    wait("all_gather");
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out, int axis, ReduceOp op) override {
    require(comm_check::reduce_scatter(in, out, axis, op, size_));
    enter();
    ChunkGeom g = geom(in, axis, size_);
    const void* src = in.raw();
    if (g.outer != 1) {  // pack chunk r of every row into block r
      void* s = scratch(in.bytes(), "reduce_scatter");
      for (int r = 0; r < size_; ++r)
        copy2d(static_cast<char*>(s) + static_cast<size_t>(r) * out.bytes(), g.chunk,
               static_cast<const char*>(in.raw()) + static_cast<size_t>(r) * g.chunk, g.chunk * static_cast<size_t>(size_),
               g.chunk, g.outer);
      src = s;
    }
    BRAID_NCCL_CHECK(ncclReduceScatter(src, out.raw(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()),
                                       nccl_op(op), comm_, stream_));
    wait("reduce_scatter");
  }
  void do_all_to_all(const Tensor& in, Tensor& out, int split_axis, int concat_axis) override {
    require(comm_check::all_to_all(in, out, split_axis, concat_axis, size_));
    enter();
    const size_t block = in.bytes() / static_cast<size_t>(size_);
    char* send = static_cast<char*>(scratch(2 * in.bytes() + 256, "all_to_all"));
    char* recv = send + (in.bytes() + 255) / 256 * 256;
    ChunkGeom gs = geom(in, split_axis, size_), gc = geom(out, concat_axis, size_);
    for (int r = 0; r < size_; ++r)
      copy2d(send + static_cast<size_t>(r) * block, gs.chunk, static_cast<const char*>(in.raw()) + static_cast<size_t>(r) * gs.chunk,
             gs.chunk * static_cast<size_t>(size_), gs.chunk, gs.outer);
    BRAID_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      BRAID_NCCL_CHECK(ncclSend(send + static_cast<size_t>(r) * block, block, ncclInt8, r, comm_, stream_));
      BRAID_NCCL_CHECK(ncclRecv(recv + static_cast<size_t>(r) * block, block, ncclInt8, r, comm_, stream_));
    }
    BRAID_NCCL_CHECK(ncclGroupEnd());
    for (int r = 0; r < size_; ++r)
      copy2d(static_cast<char*>(out.raw()) + static_cast<size_t>(r) * gc.chunk, gc.chunk * static_cast<size_t>(size_),
             recv + static_cast<size_t>(r) * block, gc.chunk, gc.chunk, gc.outer);
    wait("all_to_all");
  }
  void do_broadcast(Tensor& t, int root) override {
    require(comm_check::broadcast(t, root, size_));
    enter();
    BRAID_NCCL_CHECK(ncclBroadcast(t.raw(), t.raw(), t.bytes(), ncclInt8, root, comm_, stream_));
    wait("broadcast");
  }
  void do_barrier() override {
    enter();
    BRAID_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
    wait("barrier");
  }
  void do_send(const Tensor& t, int peer, int tag) override {
    require(comm_check::peer("send", peer, size_));
    enter();
    BRAID_NCCL_CHECK(ncclSend(t.raw(), t.bytes(), ncclInt8, peer, comm_, stream_));
    wait("send");
  }
  void do_recv(Tensor& t, int peer, int tag) override {
    require(comm_check::peer("recv", peer, size_));
    enter();
    BRAID_NCCL_CHECK(ncclRecv(t.raw(), t.bytes(), ncclInt8, peer, comm_, stream_));
    wait("recv");
  }
  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    require(comm_check::split(ranks, rank_, size_));
    enter();
    int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
    ncclUniqueId id;
    std::unique_ptr<Communicator> group;
    if (host_) {  // several processes: the group's first rank makes the id, the same group of the host world carries it
      group = host_->split(ranks);
      if (me == 0) BRAID_NCCL_CHECK(ncclGetUniqueId(&id));
      share_id(*group, id);
    } else {
      std::lock_guard<std::mutex> lock(st_->mu);
      int seq = split_count_[ranks]++;
      auto key = std::make_pair(ranks, seq);
      auto it = st_->split_ids.find(key);
      if (it == st_->split_ids.end()) {
        BRAID_NCCL_CHECK(ncclGetUniqueId(&id));
        st_->split_ids[key] = id;
      } else {
        id = it->second;
      }
    }
    ncclComm_t sub;
    BRAID_NCCL_CHECK(ncclCommInitRank(&sub, static_cast<int>(ranks.size()), id, me));
    auto c = std::make_unique<NcclCommunicator>(st_, me, sub, device_, static_cast<int>(ranks.size()));
    c->owns_comm_ = true;
    c->host_group_ = std::move(group);  // its own splits share ids over it
    c->host_ = c->host_group_.get();
    return c;
  }
  void do_abort(const std::string& reason) override {
    if (st_->host) st_->host->abort(reason);  // the other processes' waits on the host world end too
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      if (!st_->aborted) {
        st_->aborted = true;
        st_->reason = reason;
      }
    }
    abort_comm();
  }

 private:
  void enter() {
    BRAID_CUDA_CHECK(cudaSetDevice(device_));
    std::lock_guard<std::mutex> lock(st_->mu);
    if (st_->aborted) throw InternalError("nccl rank " + std::to_string(rank_) + ": communicator aborted: " + st_->reason);
  }
  void* scratch(size_t bytes, const char* what) {
    if (bytes > st_->options.scratch_bytes)
      throw InternalError(std::string("nccl ") + what + " needs " + std::to_string(bytes) +
                          " bytes of scratch, the communicator has " + std::to_string(st_->options.scratch_bytes) +
                          " (NcclOptions::scratch_bytes)");
    return scratch_;
  }
  void copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
    if (width && height)
      BRAID_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream_));
  }
  void abort_comm() {
    if (comm_ && !comm_aborted_) {
      comm_aborted_ = true;
      ncclCommAbort(comm_);
      if (!owns_comm_) st_->comms[static_cast<size_t>(rank_)] = nullptr;
      comm_ = nullptr;
    }
  }
  // Polls the stream so that an abort elsewhere or an NCCL error ends the wait instead of hanging.
  void wait(const char* what) {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) BRAID_CUDA_CHECK(e);
      ncclResult_t async = ncclSuccess;
      BRAID_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      BRAID_NCCL_CHECK(async);
      bool aborted;
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(st_->mu);
        aborted = st_->aborted;
        reason = st_->reason;
      }
      if (aborted || std::chrono::steady_clock::now() - start > st_->options.timeout) {
        abort_comm();
        throw InternalError("nccl rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) + "): " + what +
                            (aborted ? " aborted: " + reason : std::string(" timed out")));
      }
      std::this_thread::yield();
    }
  }

  std::shared_ptr<detail::NcclState> st_;
  int rank_, size_, device_;
  ncclComm_t comm_;
  bool owns_comm_ = false, comm_aborted_ = false;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  std::map<std::vector<int>, int> split_count_;
  // Several processes: this communicator's group of the host world (null in one process).
  std::unique_ptr<Communicator> host_group_;
  Communicator* host_ = nullptr;

  friend class exec::NcclWorld;
};

}  // namespace

NcclWorld::NcclWorld(const std::vector<int>& devices, NcclOptions options) : state_(std::make_shared<detail::NcclState>()) {
  state_->devices = devices;
  state_->options = options;
  state_->comms.assign(devices.size(), nullptr);
  BRAID_NCCL_CHECK(ncclCommInitAll(state_->comms.data(), static_cast<int>(devices.size()), devices.data()));
}

std::unique_ptr<NcclWorld> NcclWorld::join(Communicator& host, int device, NcclOptions options) {
  std::unique_ptr<NcclWorld> w(new NcclWorld());
  w->state_ = std::make_shared<detail::NcclState>();
  auto& st = *w->state_;
  st.options = options;
  st.host = &host;
  const int n = host.size(), rank = host.rank();
  st.devices.assign(static_cast<size_t>(n), -1);
  st.devices[static_cast<size_t>(rank)] = device;
  st.comms.assign(static_cast<size_t>(n), nullptr);
  ncclUniqueId id;
  if (rank == 0) BRAID_NCCL_CHECK(ncclGetUniqueId(&id));
  share_id(host, id);
  BRAID_CUDA_CHECK(cudaSetDevice(device));
  BRAID_NCCL_CHECK(ncclCommInitRank(&st.comms[static_cast<size_t>(rank)], n, id, rank));
  return w;
}

NcclWorld::~NcclWorld() {
  for (auto c : state_->comms)
    if (c) ncclCommDestroy(c);
}

int NcclWorld::size() const { return static_cast<int>(state_->devices.size()); }

std::unique_ptr<Communicator> NcclWorld::communicator(int rank) {
  BRAID_ASSERT(rank >= 0 && rank < size(), "nccl rank ", rank, " of ", size());
  BRAID_ASSERT(state_->comms[static_cast<size_t>(rank)] != nullptr, "nccl rank ", rank, " is in another process");
  auto c = std::make_unique<NcclCommunicator>(state_, rank, state_->comms[static_cast<size_t>(rank)],
                                              state_->devices[static_cast<size_t>(rank)], size());
  c->host_ = state_->host;
  return c;
}

void NcclWorld::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->aborted = true;
  state_->reason = reason;
}

}  // namespace braid::exec
