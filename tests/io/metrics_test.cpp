// The JSON writer (escaping, numbers that round-trip, nesting, pretty form, misuse) and the metrics file
// (one flushed line per record, append for resumed runs, lines Python's json module parses).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "io/json.h"
#include "io/metrics.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

TEST(Json, Quote) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(json_quote("ünï"), "\"ünï\"");
}

TEST(Json, NumbersRoundTrip) {
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(3.0), "3");
  EXPECT_EQ(json_number(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  for (double v : {1.0 / 3, 2.0 / 7 * 1e17, 6.02214076e23, 0.30000000000000004}) {
    EXPECT_EQ(std::strtod(json_number(v).c_str(), nullptr), v) << json_number(v);
  }
}

TEST(Json, CompactNesting) {
  JsonWriter w;
  w.begin_object().field("name", "tiny").field("layers", 3).field("ok", true).key("shape").begin_array();
  w.value(2).value(int64_t{3}).end_array().key("empty").begin_object().end_object().key("none").null().end_object();
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.str(), R"({"name":"tiny","layers":3,"ok":true,"shape":[2,3],"empty":{},"none":null})");
}

TEST(Json, Pretty) {
  JsonWriter w(2);
  w.begin_object().field("a", 1.5).key("b").begin_array().value("x").begin_object().field("c", false).end_object();
  w.end_array().key("d").begin_array().end_array().end_object();
  EXPECT_EQ(w.str(), "{\n  \"a\": 1.5,\n  \"b\": [\n    \"x\",\n    {\n      \"c\": false\n    }\n  ],\n  \"d\": []\n}");
}

TEST(Json, MisuseIsInternalError) {
  JsonWriter a;
  a.begin_object();
  EXPECT_THROW(a.value(1), InternalError);  // no key
  JsonWriter b;
  EXPECT_THROW(b.key("k"), InternalError);  // not in an object
  JsonWriter c;
  c.begin_array();
  EXPECT_THROW(c.end_object(), InternalError);
  EXPECT_FALSE(c.complete());
  JsonWriter d;
  d.value(1);
  EXPECT_THROW(d.value(2), InternalError);  // two top-level values
}

TEST(Metrics, LineFormat) {
  MetricsRecord r;
  r.step = 10;
  r.loss = 2.25;
  r.lr = 3e-4;
  r.samples_per_s = 1234.5;
  r.extra = {{"eval_loss", 1.5}, {"eval_accuracy", 0.875}};
  EXPECT_EQ(metrics_json(r),
            R"({"step":10,"loss":2.25,"lr":0.0003,"samples_per_s":1234.5,"eval_loss":1.5,"eval_accuracy":0.875})");
  MetricsRecord bare;
  bare.step = 7;
  bare.loss = std::nan("");
  EXPECT_EQ(metrics_json(bare), R"({"step":7,"loss":null})");
  bare.extra = {{"loss", 1.0}};
  EXPECT_THROW(metrics_json(bare), InternalError);
}

TEST(Metrics, FlushedLinesAndAppend) {
  TempDir dir;
  std::string p = dir.file("metrics.jsonl");
  {
    MetricsWriter w(p);
    MetricsRecord r;
    r.step = 1;
    r.loss = 0.5;
    w.write(r);
    EXPECT_EQ(read_bytes(p), "{\"step\":1,\"loss\":0.5}\n");  // visible while the writer is open
    r.step = 2;
    w.write(r);
  }
  {
    MetricsWriter w(p, /*append=*/true);
    MetricsRecord r;
    r.step = 3;
    r.extra = {{"eval_accuracy", 0.75}};
    w.write(r);
  }
  EXPECT_EQ(read_bytes(p), "{\"step\":1,\"loss\":0.5}\n{\"step\":2,\"loss\":0.5}\n{\"step\":3,\"eval_accuracy\":0.75}\n");
  MetricsWriter fresh(p);  // without append: starts over
  EXPECT_EQ(read_bytes(p), "");
}

TEST(Metrics, UnwritablePath) {
  TempDir dir;
  std::string e = user_error([&] { MetricsWriter w(dir.file("no/dir/m.jsonl")); });
  EXPECT_NE(e.find("no/dir/m.jsonl"), std::string::npos) << e;
}

TEST(Metrics, PythonParsesTheLines) {
  if (!has_python_module("json")) GTEST_SKIP() << "no python at " << BRAID_PYTHON;
  TempDir dir;
  std::string p = dir.file("m.jsonl");
  {
    MetricsWriter w(p);
    MetricsRecord r;
    r.step = 5;
    r.loss = 1.0 / 3;
    r.lr = 1e-3;
    r.extra = {{"weird \"name\"\n", 2.0}};
    w.write(r);
  }
  std::string script = dir.file("parse.py");
  write_file(script, R"(
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows == [{"step": 5, "loss": 1.0 / 3, "lr": 1e-3, "weird \"name\"\n": 2.0}], rows
)");
  std::string cmd = std::string(BRAID_PYTHON) + " " + script + " " + p;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Each record says its kind right after the step, so readers tell a logged step from the final evaluation or
// the planner's prediction (README, "The metrics file").
TEST(Metrics, KindFollowsTheStep) {
  MetricsRecord r;
  r.step = 7;
  r.kind = "prediction";
  r.extra = {{"predicted_step_s", 0.25}};
  EXPECT_EQ(metrics_json(r), "{\"step\":7,\"kind\":\"prediction\",\"predicted_step_s\":0.25}");
}
