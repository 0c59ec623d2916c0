// The Plan: how a graph is laid out on devices (stages, per-layer split signatures, micro-batches,
// schedule). For now the trainer needs only the single-device plan; the parallel-execution and planner
// issues fill in stages and signatures and the YAML form of MODEL_FORMAT.md's plan file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace braid::planner {

struct DeviceSpec {
  std::string kind = "cpu";  // cpu | cuda
  int count = 1;
  std::vector<int> ids;      // cuda:0-7 -> 0..7
};

// Parses "cpu", "cpu:4", "cuda", "cuda:0-7", "cuda:0,2"; nullopt-like: returns false and sets *err.
bool parse_devices(const std::string& text, DeviceSpec* out, std::string* err);

struct Plan {
  DeviceSpec devices;
  int64_t micro_batch = 0;
  int64_t micro_batches = 1;
  std::string schedule = "1f1b";
};

// The plan for one device: every layer whole, micro-batches as the run file says.
Plan single_device_plan(int64_t batch, int64_t micro_batch);

}  // namespace braid::planner
