// Pure data parallelism on `cpu:N`: N replicas of the whole model in one process, one worker thread each
// (created once, fed steps through a generation counter). Every micro-batch is cut into N contiguous shards;
// replica r runs shard r with its own Runner, ParamStore and Optimizer, gradients are averaged by
// all-reduce (in-process Communicator, buckets in reverse parameter order), then every replica clips and
// steps its full copy. Invariant: trainable parameters and optimizer state are bit-identical on all replicas
// (checked by checksums). Batch-norm statistics are per replica (PyTorch DDP); replica 0's are the ones
// saved and evaluated. Not here: optimizer-state sharding, overlap of all-reduce with backward, TP and PP.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "io/trace.h"

#include "exec/comm/inproc.h"
#include "exec/optimizer.h"
#include "exec/runner.h"
#include "io/run_config.h"

namespace braid::exec {

struct DataParallelOptions {
  int devices = 2;
  size_t bucket_bytes = size_t{25} << 20;  // gradient all-reduce bucket size (PyTorch DDP's default)
};

// What one step returns: the global loss (mean of the replicas' shard means, in rank order) and the
// gradient norm before clipping (-1 without clipping).
struct DpStepResult {
  double loss = 0;
  double grad_norm = -1;
};

class DataParallel {
 public:
  // Builds N replicas for micro-batches of `micro` samples (micro / N per replica; the caller checks that
  // N divides micro). Parameters are initialised from `seed` on every replica (identical values).
  DataParallel(const io::ModelSpec& m, const io::OptimizerSpec& opt, int64_t micro, uint64_t seed,
               DataParallelOptions options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return static_cast<int>(replicas_.size()); }
  ParamStore& store(int r) { return replicas_.at(static_cast<size_t>(r))->store; }
  Optimizer& optimizer(int r) { return *replicas_.at(static_cast<size_t>(r))->opt; }
  Runner& runner(int r) { return *replicas_.at(static_cast<size_t>(r))->runner; }
  // Records replica r's forward, backward, gradient all-reduce and optimizer events on `lane` (nullptr: off).
  void set_trace(int r, io::TraceLane* lane);
  // Number of gradient buckets and their sizes in bytes, in the order they are all-reduced.
  std::vector<size_t> bucket_bytes() const;

  // Copies replica 0's parameters, buffers and optimizer state (and step count) to every other replica:
  // after loading weights or a checkpoint into replica 0.
  void broadcast_from_replica0();

  // One optimizer step over the batch `batch_idx` (a multiple of micro samples): forward and backward on
  // every replica, gradient all-reduce (average), clipping (when clip > 0) and the optimizer at rate lr.
  DpStepResult step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip);

  // A checksum of replica r's trainable parameters and optimizer state (FNV-1a over 8-byte words).
  uint64_t checksum(int r) const;
  // Asserts that every replica's checksum equals replica 0's.
  void check_replicas_identical() const;

 private:
  struct Bucket {
    std::vector<size_t> entries;  // indices into the store's entries, in all-reduce order
    Tensor flat;                  // packed gradients (undefined for a bucket of one tensor: reduced in place)
  };
  struct Replica {
    int rank = 0;
    ParamStore store;
    std::unique_ptr<Runner> runner;
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Communicator> comm;
    std::vector<Bucket> buckets;
    std::vector<int64_t> scratch;
    DpStepResult result;
    std::exception_ptr error;
    io::TraceLane* trace = nullptr;
  };
  struct Job {
    io::Dataset* data = nullptr;
    std::span<const int64_t> batch_idx;
    int64_t step = 0;
    double lr = 0, clip = 0;
  };

  void worker(Replica& r);
  void run_step(Replica& r, const Job& job);
  void all_reduce_grads(Replica& r);

  int64_t micro_;
  uint64_t seed_;
  DataParallelOptions options_;
  InProcWorld world_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<std::thread> threads_;

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // incremented per step; workers run one step per increment
  int pending_ = 0;          // replicas still running the current step
  bool quit_ = false;
  Job job_;
};

}  // namespace braid::exec
