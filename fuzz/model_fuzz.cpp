// libFuzzer target for model files: parse_model on arbitrary bytes, then every attribute evaluated as an
// int, a float and a bool (the graph builder's later use of them). parse_model reports through Diagnostics;
// a UserError is tolerated, anything else (another exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    braid::Diagnostics diags;
    braid::io::ModelSpec m = braid::io::parse_model(text, "fuzz.yaml", {}, diags);
    braid::Diagnostics scratch;
    for (const auto& layer : m.layers)
      for (const auto& [name, value] : layer.attrs) {
        braid::io::eval_int(value, m.vars, name, scratch);
        braid::io::eval_float(value, m.vars, name, scratch);
        braid::io::eval_bool(value, name, scratch);
      }
  } catch (const braid::UserError&) {
  }
  return 0;
}
