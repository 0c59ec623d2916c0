// Registry-driven comparison with PyTorch: every public op, every sample, in f32. Dumps braid's inputs,
// forward outputs (training and eval mode), a random output gradient and braid's input gradients as .npy
// files plus a manifest.json into a temp directory, then runs tests/torch_ref/op_ref.py over it, which
// recomputes everything with the per-family references in tests/torch_ref/ops/*.py and compares.
// Values depend only on the op/sample label (fixed seed), not on which other ops are registered.
// Env: BRAID_TORCH_REF_OPS=a,b limits the dump to these ops; BRAID_TORCH_REF_KEEP=1 keeps the directory.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <variant>

#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;
namespace fs = std::filesystem;

namespace {

static_assert(std::endian::native == std::endian::little, "the .npy writer assumes a little-endian host");

// ---- NPY v1.0 writer: '<f4', '<f8', '<i4', '<i8', C order -------------------------------------------------
const char* npy_descr(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    default: return nullptr;
  }
}

void write_npy(const fs::path& path, const Tensor& t) {
  const char* descr = npy_descr(t.dtype());
  BRAID_ASSERT(descr != nullptr, "no .npy dtype for ", dtype_name(t.dtype()));
  const int rank = t.shape().rank();
  std::string shape = "(";
  for (int a = 0; a < rank; ++a) shape += std::to_string(t.shape()[a]) + (rank == 1 ? "," : a + 1 < rank ? ", " : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;  // magic(6) + version(2) + len(2) + header + '\n'
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  BRAID_ASSERT(f.good(), "cannot write ", path.string());
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(len_bytes, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  BRAID_ASSERT(f.good(), "short write to ", path.string());
}

// ---- a small JSON writer -----------------------------------------------------------------------------------
std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += {'\\', static_cast<char>(c)};
    else if (c == '\n') o += "\\n";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string json_double(double v) {  // shortest round-trip form, always read back as a Python float
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

template <typename T, typename F>
std::string json_list(const std::vector<T>& xs, F&& f) {
  std::string o = "[";
  for (size_t i = 0; i < xs.size(); ++i) o += (i ? ", " : "") + f(xs[i]);
  return o + "]";
}

std::string json_attr(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<X, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<X, double>) return json_double(x);
        else if constexpr (std::is_same_v<X, std::string>) return json_str(x);
        else return json_list(x, [](int64_t i) { return std::to_string(i); });
      },
      v);
}

std::string json_attrs(const Attrs& a) {
  std::string o = "{";
  bool first = true;
  for (const auto& [k, v] : a.all()) {
    o += (first ? "" : ", ") + json_str(k) + ": " + json_attr(v);
    first = false;
  }
  return o + "}";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

std::vector<std::string> op_filter() {
  std::vector<std::string> out;
  const char* env = std::getenv("BRAID_TORCH_REF_OPS");
  if (!env) return out;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Dumps one op/sample; returns its manifest entry. Throws on a braid failure (reported by the caller).
std::string dump_case(const OpDef& def, const Sample& s, const fs::path& dir, int index) {
  const std::string label = def.name + "/" + s.name;
  Rng rng(20240611, fnv1a(label));
  Instance inst = instantiate(def, s, DType::f32, rng);
  const std::string pre = "c" + std::to_string(index) + "_";
  auto put = [&](const std::string& name, const Tensor& t) {
    write_npy(dir / (pre + name + ".npy"), t);
    return json_str(pre + name + ".npy");
  };

  std::vector<std::string> in_files, in_names, diff;
  for (size_t i = 0; i < inst.inputs.size(); ++i) {
    const int k = static_cast<int>(i);
    in_names.push_back(json_str(k < inst.num_data ? "input" + std::to_string(k) : inst.params[i - static_cast<size_t>(inst.num_data)].name));
    in_files.push_back(put("in" + std::to_string(i), inst.inputs[i]));
    diff.push_back(inst.differentiable_input(k) ? "true" : "false");
  }
  std::string outputs = "{";
  for (bool training : {true, false}) {
    auto outs = run_forward(inst, training);
    BRAID_ASSERT(static_cast<int>(outs.size()) >= def.public_outputs, "fewer outputs than public_outputs");
    std::vector<std::string> files;
    const std::string mode = training ? "train" : "eval";
    for (int k = 0; k < def.public_outputs; ++k) files.push_back(put(mode + "_out" + std::to_string(k), outs[static_cast<size_t>(k)]));
    outputs += json_str(mode) + ": " + json_list(files, [](const std::string& x) { return x; }) + (training ? ", " : "}");
  }

  std::string dy = "null", grads = "null";
  bool any_diff = false;
  for (size_t i = 0; i < inst.inputs.size(); ++i) any_diff |= inst.differentiable_input(static_cast<int>(i));
  if (def.differentiable && def.grad && any_diff) {
    auto out0 = run_forward(inst, true)[0];
    Tensor r = Tensor::empty(out0.desc());
    for (int64_t i = 0; i < r.numel(); ++i) set_from_double(r, i, rng.uniform(-1, 1));
    dy = put("dy", r);
    auto g = run_backward(inst, r);
    std::vector<std::string> files;
    for (size_t i = 0; i < g.size(); ++i)
      files.push_back(inst.differentiable_input(static_cast<int>(i)) && g[i].defined() ? put("grad" + std::to_string(i), g[i]) : "null");
    grads = json_list(files, [](const std::string& x) { return x; });
  }

  auto id = [](const std::string& x) { return x; };
  std::ostringstream o;
  o << "    {\"op\": " << json_str(def.name) << ", \"sample\": " << json_str(s.name) << ", \"attrs\": " << json_attrs(inst.attrs)
    << ",\n     \"inputs\": " << json_list(in_files, id) << ", \"input_names\": " << json_list(in_names, id)
    << ", \"differentiable\": " << json_list(diff, id) << ",\n     \"num_public_outputs\": " << def.public_outputs
    << ", \"outputs\": " << outputs << ", \"dy\": " << dy << ", \"grads\": " << grads
    << ",\n     \"torch_rtol\": " << json_double(def.torch_rtol) << ", \"torch_atol\": " << json_double(def.torch_atol) << "}";
  return o.str();
}

}  // namespace

TEST(TorchRef, EveryPublicOpMatchesPyTorch) {
  const char* env_python = std::getenv("BRAID_PYTHON");
  const std::string python = env_python && *env_python ? env_python : BRAID_PYTHON;
  const std::string script = std::string(BRAID_SOURCE_DIR) + "/tests/torch_ref/op_ref.py";
  if (!fs::exists(python))
    GTEST_SKIP() << "SKIPPED, NOT PASSED: " << python << " not found, so braid's ops were not compared with PyTorch";

  std::string tmpl = (fs::temp_directory_path() / "braid_torch_ref_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp failed";
  const fs::path dir = tmpl;

  auto filter = op_filter();
  std::vector<std::string> cases, names;
  int index = 0;
  for (const auto* d : public_ops()) {
    names.push_back(json_str(d->name));
    if (!filter.empty() && std::find(filter.begin(), filter.end(), d->name) == filter.end()) continue;
    ASSERT_NE(d->samples, nullptr) << d->name << " has no samples";
    for (const auto& s : d->samples()) {
      try {
        cases.push_back(dump_case(*d, s, dir, index++));
      } catch (const std::exception& e) {
        ADD_FAILURE() << d->name << "/" << s.name << ": braid failed to run the sample: " << e.what();
      }
    }
  }
  {
    std::ofstream m(dir / "manifest.json");
    m << "{\"version\": 1, \"filtered\": " << (filter.empty() ? "false" : "true") << ",\n \"public_ops\": "
      << json_list(names, [](const std::string& x) { return x; }) << ",\n \"cases\": [\n";
    for (size_t i = 0; i < cases.size(); ++i) m << cases[i] << (i + 1 < cases.size() ? ",\n" : "\n");
    m << " ]}\n";
    ASSERT_TRUE(m.good()) << "cannot write manifest";
  }

  const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(dir.string()) + " 2>&1";
  std::string output;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << "cannot run " << cmd;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::cout << output << std::flush;

  const char* keep = std::getenv("BRAID_TORCH_REF_KEEP");
  const bool kept = (keep && *keep && std::string(keep) != "0") || (rc != 0 && rc != 77);
  if (kept) std::cout << "[torch_ref] files kept in " << dir.string() << "\n";
  else fs::remove_all(dir);

  if (rc == 77) GTEST_SKIP() << "SKIPPED, NOT PASSED: `import torch` failed in " << python << ":\n" << output;
  std::string failing;  // the FAIL lines alone, so that the failure message names the cases
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("FAIL", 0) == 0) failing += line + "\n";
  EXPECT_EQ(rc, 0) << cmd << " failed (status " << status << "); details in the report above\n" << failing;
}
