// The broken-file corpus (tests/bad/*.yaml): each file opens with `# expect: [FILE:]LINE:COL FRAGMENT`
// (FILE relative to tests/bad, or "<command line>"; default: the file itself), optionally followed by
// `# set: KEY=VALUE` lines passed as --set and `# expect-also:` lines (more mistakes of the same file, which
// tests/cli/bad_corpus.py checks one run reports). Loading it must throw a UserError holding a diagnostic at
// exactly that place whose message or hint contains FRAGMENT, quickly, and nothing else may be thrown.
// `# expect-cli:` files are mistakes only later layers (ops, graph) catch: io must accept them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

#include "io/run_config.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string path;
  bool cli_only = false;
  std::string file;  // expected file of the diagnostic
  int line = 0, col = 0;
  std::string fragment;
  std::vector<std::string> sets;
};

std::string bad_dir() { return std::string(BRAID_SOURCE_DIR) + "/tests/bad"; }

std::vector<std::string> corpus_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(bad_dir()))
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Parses the header lines of a corpus file; an empty optional when the header is malformed.
std::optional<Case> read_case(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string first;
  std::getline(in, first);
  static const std::regex kExpect(R"(^# expect(-cli)?: (?:(.+):)?(\d+):(\d+) (.+)$)");
  std::smatch m;
  if (!std::regex_match(first, m, kExpect)) return std::nullopt;
  Case c;
  c.path = path;
  c.cli_only = m[1].matched;
  c.file = !m[2].matched ? path : m[2].str() == "<command line>" ? m[2].str() : bad_dir() + "/" + m[2].str();
  c.line = std::stoi(m[3]);
  c.col = std::stoi(m[4]);
  c.fragment = m[5];
  std::string line;
  while (std::getline(in, line) && (line.rfind("# set: ", 0) == 0 || line.rfind("# expect-also: ", 0) == 0))
    if (line.rfind("# set: ", 0) == 0) c.sets.push_back(line.substr(7));  // expect-also: the CLI test checks them
  return c;
}

TEST(BadCorpus, EveryFileHasAnExpectation) {
  auto files = corpus_files();
  int expect = 0;
  for (const auto& f : files) {
    auto c = read_case(f);
    EXPECT_TRUE(c.has_value()) << f << ": the first line must be '# expect: LINE:COL FRAGMENT' or '# expect-cli: ...'";
    if (c && !c->cli_only) ++expect;
  }
  EXPECT_GE(expect, 40) << "the corpus must hold at least 40 files that io rejects";
}

class BadFile : public ::testing::TestWithParam<std::string> {};

TEST_P(BadFile, FailsAtTheExpectedPlace) {
  auto c = read_case(GetParam());
  ASSERT_TRUE(c.has_value());
  auto t0 = std::chrono::steady_clock::now();
  try {
    RunConfig rc = load_run_or_model(c->path, c->sets);
    if (!c->cli_only) ADD_FAILURE() << "no error; expected " << c->line << ":" << c->col << " " << c->fragment;
  } catch (const UserError& e) {
    if (c->cli_only) {
      ADD_FAILURE() << "io rejects an expect-cli file; make it '# expect:'\n" << e.format();
    } else {
      bool found = false;
      for (const auto& d : e.diagnostics())
        found |= d.loc.file == c->file && iotest::has_diag(std::vector<Diagnostic>{d}, c->line, c->col, c->fragment);
      EXPECT_TRUE(found) << "expected " << c->file << ":" << c->line << ":" << c->col << " '" << c->fragment
                         << "'; got:\n" << e.format();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than UserError: " << e.what();
  } catch (...) {
    ADD_FAILURE() << "threw something other than UserError";
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0) << "too slow";
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = fs::path(info.param).stem().string();
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadFile, ::testing::ValuesIn(corpus_files()), case_name);

}  // namespace
