// Helpers shared by the checkpoint tests: a sample checkpoint with every kind of content (params of several
// dtypes and one spanning many chunks, buffers with an i64 scalar, AdamW-like optimizer state, random
// streams with the top bit set, a data cursor, texts with non-ASCII characters), a deep comparison, and where
// a tensor's bytes lie in a file (for flipping them).
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io/checkpoint.h"

namespace braid::io::testing {

inline Tensor ramp(Shape s, DType t, double scale = 1) {
  Tensor x = Tensor::empty({std::move(s), t});
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = static_cast<double>(i) * scale - 3;
    switch (t) {
      case DType::i32: x.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::i64: x.data<int64_t>()[i] = static_cast<int64_t>(v) * 1000000007LL; break;
      default: set_from_double(x, i, v);
    }
  }
  return x;
}

inline bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.desc() == b.desc() && (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

// big_rows x 1024 f32 for /params/big.weight (4 KiB rows: 1024 rows per 4 MiB chunk).
inline Checkpoint sample_checkpoint(int64_t step = 42, int64_t big_rows = 300) {
  Checkpoint c;
  c.meta.step = step;
  c.meta.epoch = 3;
  c.meta.samples_seen = step * 32;
  c.meta.wall_time_s = 12.625;
  c.meta.run_path = "configs/tiny.yaml";
  c.meta.model_path = "models/tiny.yaml";
  c.meta.run_text = "model: ../models/tiny.yaml\n# ünïcode\ntrain: {batch: 32}\n";
  c.meta.model_text = "inputs: {x: [4]}\nlayers:\n  - {name: fc, op: linear, out: 3}\n";
  c.params = {{"fc.weight", ramp(Shape{3, 4}, DType::f32, 0.25)},
              {"fc.bias", ramp(Shape{3}, DType::f32, 0.5)},
              {"h.0.attn.in_proj_weight", ramp(Shape{6, 2}, DType::f64, 1.0 / 3)},
              {"big.weight", ramp(Shape{big_rows, 1024}, DType::f32, 1e-3)}};
  c.buffers = {{"bn1.running_mean", ramp(Shape{4}, DType::f32, 0.1)},
               {"bn1.num_batches_tracked", ramp(Shape{}, DType::i64)},
               {"emb.empty", Tensor::empty({Shape{0, 3}, DType::f32})}};
  for (const auto& [name, t] : c.params)
    for (const char* state : {"exp_avg", "exp_avg_sq"})
      c.optimizer.push_back({name, state, ramp(t.shape(), t.dtype(), state[7] ? 0.02 : 0.01)});
  c.optimizer_steps = step;
  c.optimizer_type = "adamw";
  c.rng = {{"init", 1, 0}, {"dropout", 0x8000000000000001ULL, 77}, {"shuffle", 5, 0xfedcba9876543210ULL}};
  c.data = {3, 1234, 0xffffffffffffffffULL};
  c.plan_text = "stages: 1\n";
  return c;
}

inline void expect_same_tensors(const NamedTensors& a, const NamedTensors& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  // The reader returns name order; compare by name.
  for (const auto& [name, t] : a) {
    bool found = false;
    for (const auto& [n2, t2] : b)
      if (n2 == name) {
        found = true;
        EXPECT_TRUE(same_tensor(t, t2)) << what << " " << name;
      }
    EXPECT_TRUE(found) << what << " " << name;
  }
}

inline void expect_same_checkpoint(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.meta.format_version, b.meta.format_version);
  EXPECT_EQ(a.meta.braid_version, b.meta.braid_version);
  EXPECT_EQ(a.meta.step, b.meta.step);
  EXPECT_EQ(a.meta.epoch, b.meta.epoch);
  EXPECT_EQ(a.meta.samples_seen, b.meta.samples_seen);
  EXPECT_EQ(a.meta.wall_time_s, b.meta.wall_time_s);
  EXPECT_EQ(a.meta.run_path, b.meta.run_path);
  EXPECT_EQ(a.meta.model_path, b.meta.model_path);
  EXPECT_EQ(a.meta.run_text, b.meta.run_text);
  EXPECT_EQ(a.meta.model_text, b.meta.model_text);
  expect_same_tensors(a.params, b.params, "params");
  expect_same_tensors(a.buffers, b.buffers, "buffers");
  ASSERT_EQ(a.optimizer.size(), b.optimizer.size());
  for (const auto& e : a.optimizer) {
    bool found = false;
    for (const auto& e2 : b.optimizer)
      if (e2.param == e.param && e2.state == e.state) {
        found = true;
        EXPECT_TRUE(same_tensor(e.value, e2.value)) << e.param << "/" << e.state;
      }
    EXPECT_TRUE(found) << e.param << "/" << e.state;
  }
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
  EXPECT_EQ(a.loss_scale, b.loss_scale);
  EXPECT_EQ(a.loss_scale_growth_tracker, b.loss_scale_growth_tracker);
  EXPECT_EQ(a.optimizer_type, b.optimizer_type);
  ASSERT_EQ(a.rng.size(), b.rng.size());
  for (const auto& r : a.rng) {
    bool found = false;
    for (const auto& r2 : b.rng)
      if (r2.name == r.name) {
        found = true;
        EXPECT_EQ(r.key, r2.key) << r.name;
        EXPECT_EQ(r.counter, r2.counter) << r.name;
      }
    EXPECT_TRUE(found) << r.name;
  }
  EXPECT_EQ(a.data.epoch, b.data.epoch);
  EXPECT_EQ(a.data.position, b.data.position);
  EXPECT_EQ(a.data.seed, b.data.seed);
  EXPECT_EQ(a.plan_text, b.plan_text);
}

// File offset of the first bytes of `t` in the file at `path` (its first chunk when chunked), found by
// content: HDF5's own chunk addresses are relative to the user block in some versions.
inline int64_t data_offset(const std::string& path, const Tensor& t) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::string needle(static_cast<const char*>(t.raw()), std::min<size_t>(t.bytes(), 64));
  size_t at = bytes.find(needle);
  if (at == std::string::npos || bytes.find(needle, at + 1) != std::string::npos) return -1;  // absent or ambiguous
  return static_cast<int64_t>(at);
}

}  // namespace braid::io::testing
