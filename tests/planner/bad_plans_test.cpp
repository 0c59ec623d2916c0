// The broken-plan corpus (tests/bad_plans/*.yaml): each file is a plan for tiny_gpt (batch 8, cpu:4) with
// one mistake; its first line `# expect: LINE:COL FRAGMENT` says where and how it must fail. Reading
// (parse_plan) and, when that finds nothing, validation (validate_plan against tiny_gpt's graph) must
// report exactly one error, at that place, whose message or hint holds FRAGMENT: one mistake, one message.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "planner/plan.h"
#include "plan_test_util.h"

using namespace braid;
using namespace braid::planner;
using namespace braid::planner::test;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 8;

std::string corpus_dir() { return source_dir() + "/tests/bad_plans"; }

std::vector<std::string> corpus_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(corpus_dir()))
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

struct Expect {
  int line = 0, col = 0;
  std::string fragment;
};

std::optional<Expect> read_expect(const std::string& text) {
  static const std::regex kExpect(R"(^# expect: (\d+):(\d+) (.+)$)");
  std::string first = text.substr(0, text.find('\n'));
  std::smatch m;
  if (!std::regex_match(first, m, kExpect)) return std::nullopt;
  return Expect{std::stoi(m[1]), std::stoi(m[2]), m[3]};
}

const graph::Graph& tiny_gpt() {
  static const graph::Graph g = model_graph("tiny_gpt.yaml", kBatch);
  return g;
}

TEST(BadPlans, EveryFileHasAnExpectation) {
  auto files = corpus_files();
  EXPECT_GE(files.size(), 12u);
  for (const auto& f : files)
    EXPECT_TRUE(read_expect(slurp(f)).has_value()) << f << ": the first line must be '# expect: LINE:COL FRAGMENT'";
}

class BadPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(BadPlan, FailsOnceAtTheExpectedPlace) {
  const std::string path = GetParam();
  const std::string text = slurp(path);
  auto want = read_expect(text);
  ASSERT_TRUE(want.has_value());
  DeviceSpec devices;
  std::string err;
  ASSERT_TRUE(parse_devices("cpu:4", &devices, &err)) << err;
  Diagnostics d;
  try {
    Plan p = parse_plan(text, path, d);
    if (d.empty()) validate_plan(p, tiny_gpt(), kBatch, devices, d);
  } catch (const std::exception& e) {
    FAIL() << "threw instead of reporting: " << e.what();
  }
  ASSERT_EQ(d.size(), 1u) << "expected one error at " << want->line << ":" << want->col << " '" << want->fragment
                          << "'; got:\n" << dump(d);
  const Diagnostic& got = d.all()[0];
  EXPECT_EQ(got.loc.file, path);
  EXPECT_EQ(got.loc.line, want->line) << dump(d);
  EXPECT_EQ(got.loc.col, want->col) << dump(d);
  EXPECT_TRUE(got.message.find(want->fragment) != std::string::npos ||
              got.hint.find(want->fragment) != std::string::npos)
      << "'" << want->fragment << "' not in:\n" << dump(d);
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = fs::path(info.param).stem().string();
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadPlan, ::testing::ValuesIn(corpus_files()), case_name);

}  // namespace
