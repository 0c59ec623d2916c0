// Helpers shared by the planner tests: graphs of the shipped models, file text, diagnostics dumps.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "graph/build.h"
#include "io/model_spec.h"

namespace braid::planner::test {

inline std::string source_dir() { return BRAID_SOURCE_DIR; }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The forward graph of a model file under models/ at the given batch.
inline graph::Graph model_graph(const std::string& name, int64_t batch) {
  Diagnostics diags;
  io::ModelSpec m = io::load_model(source_dir() + "/models/" + name, {}, diags);
  diags.throw_if_any();
  return graph::build_graph(m, batch);
}

inline std::string dump(const Diagnostics& d) {
  std::string out;
  for (const auto& x : d.all()) out += x.format() + "\n";
  return out;
}

}  // namespace braid::planner::test
