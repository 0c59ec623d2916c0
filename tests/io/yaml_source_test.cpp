// Tests of YAML loading: exact 1-based line:col (in characters), duplicate keys, tabs, empty and binary
// files, alias budgets (billion laughs), nesting depth, merge keys, line endings and check_keys.
#include <gtest/gtest.h>

#include <chrono>

#include "io/line_table.h"
#include "io/yaml_source.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

YNode parse(const std::string& text, Diagnostics& d, const YamlLimits& lim = {}) {
  return parse_yaml(text, "t.yaml", d, lim);
}

TEST(Yaml, LocationsAreOneBasedAndCountCharacters) {
  Diagnostics d;
  YNode n = parse("a: 1\nbé: [x, \"y\"]\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  ASSERT_TRUE(n.is_map());
  EXPECT_EQ(n.get("a")->loc.str(), "t.yaml:1:4");
  EXPECT_EQ(n.key_loc("bé")->str(), "t.yaml:2:1");
  const YNode* s = n.get("bé");
  ASSERT_TRUE(s && s->is_seq());
  EXPECT_EQ(s->loc.col, 5);
  EXPECT_EQ(s->seq[0].loc.col, 6);
  EXPECT_FALSE(s->seq[0].quoted);
  EXPECT_EQ(s->seq[1].loc.col, 9);
  EXPECT_TRUE(s->seq[1].quoted);
  EXPECT_EQ(s->seq[1].scalar, "y");
}

TEST(Yaml, NullsAndKinds) {
  Diagnostics d;
  YNode n = parse("a:\nb: ~\nc: null\nd: 'null'\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_TRUE(n.get("a")->is_null());
  EXPECT_TRUE(n.get("b")->is_null());
  EXPECT_TRUE(n.get("c")->is_null());
  EXPECT_TRUE(n.get("d")->is_scalar());
  EXPECT_EQ(n.kind_name(), "a mapping");
  EXPECT_EQ(n.keys(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(n.get("zz"), nullptr);
}

TEST(Yaml, EmptyValueIsPlacedAfterItsKey) {
  Diagnostics d;
  YNode n = parse("a:\n  dtype:\n  \"q\":\nb: 1\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_EQ(n.get("a")->get("dtype")->loc.str(), "t.yaml:2:9");
  EXPECT_EQ(n.get("a")->get("q")->loc.str(), "t.yaml:3:7");
}

TEST(Yaml, DuplicateKeyReportedAtSecondOccurrence) {
  Diagnostics d;
  YNode n = parse("a: 1\nb: 2\na: 3\nm: {x: 1, x: 2}\n", d);
  EXPECT_DIAG(d, 3, 1, "duplicate key 'a'");
  EXPECT_DIAG(d, 4, 11, "duplicate key 'x'");
  EXPECT_EQ(d.size(), 2u);
  ASSERT_TRUE(n.is_map());  // the tree stays usable; the first occurrence wins
  EXPECT_EQ(n.get("a")->scalar, "1");
  EXPECT_EQ(n.map.size(), 3u);
}

TEST(Yaml, QuotedKeyDuplicatesPlainKey) {
  Diagnostics d;
  parse("lr: 1\n\"lr\": 2\n", d);
  EXPECT_DIAG(d, 2, 1, "duplicate key 'lr'");
}

TEST(Yaml, TabInIndentationIsReportedAtTheTab) {
  Diagnostics d;
  parse("a:\n  b: 1\n\tc: 2\n", d);
  EXPECT_DIAG(d, 3, 1, "tab");
  Diagnostics d2;
  parse("a:\n  \tb: 1\n", d2);
  EXPECT_DIAG(d2, 2, 3, "tabs for indentation");
}

// libyaml refuses a tab that starts a block scalar's first line when the indentation is detected ("a: |" then
// "  \tx"); with an indentation indicator ("|2") it is content.
TEST(Yaml, TabsAllowedWhereYamlAllowsThem) {
  for (const char* text : {"a: [1,\n\t2]\n", "a: \"x\n\ty\"\n", "a: |2\n  \tx\n", "a:\t1\n", "- \tx\n", "a: 1\t# c\n"}) {
    Diagnostics d;
    YNode n = parse(text, d);
    EXPECT_TRUE(d.empty()) << text << "\n" << iotest::dump(d);
  }
}

TEST(Yaml, EmptyFileIsAnErrorAtOneOne) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "   "}) {
    Diagnostics d;
    YNode n = parse(text, d);
    EXPECT_TRUE(n.is_null());
    EXPECT_EQ(d.size(), 1u);
    EXPECT_DIAG(d, 1, 1, "empty file");
  }
}

TEST(Yaml, BinaryGarbageGivesOneCleanError) {
  struct Case {
    std::string text;
    int line, col;
    const char* fragment;
  };
  std::vector<Case> cases = {
      {std::string("\x7f" "ELF\x02\x01\x01", 7), 1, 1, "control character 0x7f"},
      {"a: 1\nb: \xff\xfe", 2, 4, "invalid UTF-8 byte 0xff"},
      {std::string("a: 1\0b", 6), 1, 5, "NUL byte"},
      {"a: \xc3\x28", 1, 4, "invalid UTF-8"},  // a lead byte without its continuation
      {"a: \xed\xa0\x80", 1, 4, "invalid UTF-8"},  // an encoded surrogate
      {"\x1b[31m", 1, 1, "control character 0x1b"},
  };
  for (const auto& c : cases) {
    Diagnostics d;
    YNode n = parse(c.text, d);
    EXPECT_TRUE(n.is_null());
    EXPECT_EQ(d.size(), 1u) << iotest::dump(d);
    EXPECT_DIAG(d, c.line, c.col, c.fragment);
    EXPECT_DIAG(d, c.line, c.col, "not a text file");
  }
}

TEST(Yaml, ByteOrderMarkAndLineEndings) {
  Diagnostics d;
  YNode n = parse("\xEF\xBB\xBF" "a: 1\r\nb: [\r\n  2]\rc: x\r\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_EQ(n.key_loc("a")->str(), "t.yaml:1:1");
  EXPECT_EQ(n.get("b")->seq[0].loc.str(), "t.yaml:3:3");
  EXPECT_EQ(n.get("c")->loc.str(), "t.yaml:4:4");
}

TEST(Yaml, BillionLaughsIsAnErrorNotAnOutOfMemory) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    std::string p = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 1; k < 10; ++k) text += ", " + p;
    text += "]\n";
  }
  auto t0 = std::chrono::steady_clock::now();
  Diagnostics d;
  YNode n = parse(text, d);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(n.is_null());
  ASSERT_EQ(d.size(), 1u) << iotest::dump(d);
  EXPECT_NE(d.all()[0].hint.find("billion laughs"), std::string::npos);
  EXPECT_LT(secs, 10.0);
}

TEST(Yaml, SmallAliasBudgetAndAliasLocations) {
  Diagnostics d;
  YNode n = parse("x: &a [1, 2]\ny: *a\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  ASSERT_TRUE(n.get("y")->is_seq());
  EXPECT_EQ(n.get("y")->seq.size(), 2u);
  EXPECT_EQ(n.get("y")->loc.str(), "t.yaml:2:4");  // the alias itself
  EXPECT_EQ(n.get("y")->seq[1].loc.str(), "t.yaml:1:11");  // inner nodes keep their definition's place
  Diagnostics d2;
  YamlLimits lim;
  lim.max_nodes = 20;
  parse("x: &a [1, 2, 3, 4]\ny: [*a, *a, *a, *a]\n", d2, lim);
  EXPECT_DIAG(d2, 2, 9, "more than 20 YAML nodes");
}

TEST(Yaml, AliasInsideItsOwnAnchorAndUndefinedAlias) {
  Diagnostics d;
  parse("a: &x [1, *x]\n", d);
  EXPECT_DIAG(d, 1, 11, "contains it");
  Diagnostics d2;
  parse("a: *nope\n", d2);
  EXPECT_DIAG(d2, 1, 4, "anchor");
}

TEST(Yaml, MergeKeys) {
  Diagnostics d;
  YNode n = parse("base: &b {x: 1, y: 2}\nd: {<<: *b, y: 3}\ne:\n  <<: [*b, {z: 4}]\n", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  const YNode* dd = n.get("d");
  EXPECT_EQ(dd->get("x")->scalar, "1");
  EXPECT_EQ(dd->get("y")->scalar, "3");
  EXPECT_EQ(n.get("e")->get("z")->scalar, "4");
  Diagnostics d2;
  parse("d: {<<: 5}\n", d2);
  EXPECT_DIAG(d2, 1, 9, "merge key");
}

TEST(Yaml, DeepNestingIsRefusedBeforeYamlCppRecurses) {
  Diagnostics d;
  parse(std::string(200000, '['), d);
  EXPECT_DIAG(d, 1, 64, "nesting deeper than 64 levels");
  Diagnostics d2;
  std::string dashes;
  for (int i = 0; i < 5000; ++i) dashes += "- ";
  parse(dashes + "x\n", d2);
  EXPECT_EQ(d2.size(), 1u);
  EXPECT_DIAG(d2, 1, 129, "nesting deeper");
  Diagnostics d3;
  std::string stairs;
  for (int i = 0; i < 100; ++i) stairs += std::string(i, ' ') + "k" + std::to_string(i) + ":\n";
  parse(stairs, d3);
  EXPECT_DIAG(d3, 65, 65, "nesting deeper");
  Diagnostics d4;  // brackets inside quotes, comments and plain scalars do not count
  std::string deep_text = "a: \"" + std::string(100, '[') + "\"\nb: x[[[[\n# " + std::string(100, '{') + "\n";
  parse(deep_text, d4);
  EXPECT_TRUE(d4.empty()) << iotest::dump(d4);
}

TEST(Yaml, AliasesCannotStackPastTheDepthLimit) {
  // Each line nests the previous anchor 50 levels deeper: few nodes, but a tree far deeper than the text.
  std::string text = "a0: &a0 x\n";
  for (int i = 1; i < 3000; ++i)
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " " + std::string(50, '[') + "*a" +
            std::to_string(i - 1) + std::string(50, ']') + "\n";
  Diagnostics d;
  YNode n = parse(text, d);
  EXPECT_TRUE(n.is_null());
  EXPECT_DIAG(d, 3, 59, "alias '*a1' nests deeper than 64 levels");
}

TEST(Yaml, ModerateNestingIsFine) {
  Diagnostics d;
  YNode n = parse(std::string(60, '[') + std::string(60, ']'), d);
  EXPECT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_TRUE(n.is_seq());
}

TEST(Yaml, SyntaxErrorsAreLocated) {
  Diagnostics d;
  parse("a: 1\n b: 2\n", d);
  EXPECT_DIAG(d, 2, 3, "invalid YAML");
  Diagnostics d2;
  parse("é: [1, ]]\n", d2);
  EXPECT_DIAG(d2, 1, 9, "invalid YAML");
}

TEST(Yaml, SecondDocumentIsAnError) {
  Diagnostics d;
  parse("a: 1\n---\nb: 2\n", d);
  EXPECT_DIAG(d, 2, 1, "second YAML document");
}

TEST(Yaml, NonScalarKeys) {
  Diagnostics d;
  parse("? [a]\n: 1\n", d);
  EXPECT_DIAG(d, 1, 3, "keys must be scalars");
}

TEST(Yaml, SizeLimit) {
  Diagnostics d;
  YamlLimits lim;
  lim.max_bytes = 8;
  parse("a: 123456789\n", d, lim);
  EXPECT_DIAG(d, 1, 1, "too large");
}

TEST(Yaml, CheckKeysSuggests) {
  Diagnostics d;
  YNode n = parse("layer: []\nzzz: 1\nname: x\n", d);
  check_keys(n, {"name", "layers", "inputs"}, "the model file", d);
  EXPECT_DIAG(d, 1, 1, "unknown key 'layer' in the model file");
  EXPECT_DIAG(d, 1, 1, "did you mean 'layers'?");
  EXPECT_DIAG(d, 2, 1, "allowed keys: name, layers, inputs");
  EXPECT_EQ(d.size(), 2u);
}

TEST(Yaml, LoadFileMissing) {
  Diagnostics d;
  load_yaml_file("/nonexistent/x.yaml", d, SourceLoc{"run.yaml", 2, 8});
  EXPECT_DIAG(d, 2, 8, "/nonexistent/x.yaml");
  iotest::TempDir t;
  Diagnostics d2;
  YNode n = load_yaml_file(t.write("a.yaml", "k: v\n"), d2);
  EXPECT_TRUE(d2.empty());
  EXPECT_EQ(n.get("k")->loc.file, t.path() + "/a.yaml");
}

}  // namespace

namespace {

// Issue 24: a position lookup examines a bounded number of bytes however long the line is (it used to count
// every character from the line start, which made a one-line 5 MB file take over a minute).
TEST(LineTable, LookupCostDoesNotGrowWithTheLine) {
  std::string text;
  for (int i = 0; text.size() < (2u << 20); ++i) text += i % 7 == 0 ? "é, " : "ab, ";  // 2 MiB, one line
  text += "\nlast";
  const std::string file = "long.yaml";
  LineTable lt(text, file);
  size_t expect_chars = 0;
  std::vector<size_t> probes = {0, 1, 63, 64, 65, 1000, text.size() / 2, text.size() - 6};
  for (size_t off : probes) {
    expect_chars = 0;
    for (size_t i = 0; i < off; ++i) expect_chars += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    SourceLoc loc = lt.at(0, static_cast<int>(off));
    EXPECT_EQ(loc.line, 1);
    EXPECT_EQ(loc.col, static_cast<int>(expect_chars) + 1) << "offset " << off;
    EXPECT_LE(lt.last_scanned(), 2 * LineTable::kStride) << "offset " << off;
  }
  SourceLoc last = lt.at_offset(text.size() - 2);
  EXPECT_EQ(last.line, 2);
  EXPECT_EQ(last.col, 3);
  EXPECT_LE(lt.last_scanned(), 2 * LineTable::kStride);
  EXPECT_EQ(lt.at(5, 0).line, 2);  // lines past the end clamp to the last
}

TEST(LineTable, EmptyTextAndMultibyteColumns) {
  const std::string empty, file = "e.yaml";
  EXPECT_EQ(LineTable(empty, file).at(0, 0).str(), "e.yaml:1:1");
  const std::string text = "€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€: x";  // 40 three-byte characters
  LineTable lt(text, file);
  EXPECT_EQ(lt.at(0, 120).col, 41);
  EXPECT_EQ(lt.at(0, 122).col, 43);
}

// A one-line file with many nodes: every node's column is exact (functional check; no clock).
TEST(Yaml, OneLineFileLocatesItsLastNode) {
  std::string text = "{";
  for (int i = 0; i < 50000; ++i) text += "v" + std::to_string(i) + ": " + std::to_string(i) + ", ";
  size_t col = text.size() + 1;
  text += "last: 7}";
  Diagnostics d;
  YNode n = parse_yaml(text, "one.yaml", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d);
  ASSERT_TRUE(n.is_map());
  EXPECT_EQ(n.key_loc("last")->str(), "one.yaml:1:" + std::to_string(col));
}

}  // namespace
