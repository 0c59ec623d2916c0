// Run files (MODEL_FORMAT.md, "Run file"): `--set dotted.key=value` overrides are parsed as YAML and grafted
// onto the run file's tree before anything is read, so they are checked exactly like the file; their
// errors are located at "<command line>:N:C" (N-th --set, column C of its text) and their messages start
// with "--set KEY=VALUE: ". Every section is strict (types, ranges, unknown keys with did-you-mean). A file
// without `model:` is read as a bare model file, where only `--set vars.NAME=...` applies.
#include "io/run_config.h"

#include <algorithm>
#include <limits>

#include "io/paths.h"

namespace braid::io {

namespace {

const std::string kCmdLine = "<command line>";
const std::vector<std::string> kRunKeys = {"model",    "vars",       "data", "train", "optimizer", "lr_schedule",
                                           "devices",  "parallel",   "checkpoint", "log", "eval"};
const std::vector<std::string> kModelOnlyKeys = {"inputs", "layers", "blocks", "outputs", "metrics"};

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// ---- --set --------------------------------------------------------------------------------------------------

struct SetOverride {
  std::vector<std::string> keys;
  std::vector<SourceLoc> key_locs;
  YNode value;
};

void relocate(YNode& n, int line, int col_offset) {
  n.loc.file = kCmdLine;
  if (n.loc.line == 1) n.loc.col += col_offset;
  n.loc.line = line;
  for (auto& x : n.seq) relocate(x, line, col_offset);
  for (auto& [k, v] : n.map) relocate(k, line, col_offset), relocate(v, line, col_offset);
}

// Parses the `index`-th (0-based) --set; returns nullopt after reporting a malformed one.
std::optional<SetOverride> parse_set(const std::string& s, size_t index, Diagnostics& diags) {
  int line = static_cast<int>(index) + 1;
  auto at = [&](size_t off) { return SourceLoc{kCmdLine, line, static_cast<int>(off) + 1}; };
  size_t eq = s.find('=');
  if (eq == std::string::npos) {
    diags.error(at(0), "expected KEY=VALUE", "e.g. --set optimizer.lr=1e-3 or --set vars.n_layer=6");
    return std::nullopt;
  }
  SetOverride o;
  for (size_t start = 0; start <= eq;) {
    size_t dot = std::min(s.find('.', start), eq);
    std::string part = s.substr(start, dot - start);
    if (part.empty()) {
      diags.error(at(start), "empty part in the key " + quote(s.substr(0, eq)));
      return std::nullopt;
    }
    o.keys.push_back(part);
    o.key_locs.push_back(at(start));
    start = dot + 1;
  }
  std::string value = s.substr(eq + 1);
  size_t first = value.find_first_not_of(" \t");
  if (first == std::string::npos || value[first] == '#') {
    diags.error(at(eq + 1), "no value after '='");
    return std::nullopt;
  }
  Diagnostics local;
  o.value = parse_yaml(value, kCmdLine, local);
  int col_offset = static_cast<int>(eq) + 1;
  for (const auto& d : local.all()) {
    SourceLoc l = d.loc;
    if (l.line == 1) l.col += col_offset;
    else l.col = static_cast<int>(s.size()) + 1;  // past the value's end (an unclosed bracket): point there
    l.line = line;
    diags.error(l, d.message, d.hint);
  }
  if (!local.empty()) return std::nullopt;
  relocate(o.value, line, col_offset);
  return o;
}

// Grafts an override onto the run file's tree, creating intermediate mappings.
void apply_set(YNode& root, const SetOverride& o, Diagnostics& diags) {
  YNode* cur = &root;
  for (size_t i = 0; i < o.keys.size(); ++i) {
    if (cur->is_null()) cur->kind = YNode::Kind::Map;
    if (!cur->is_map()) {
      std::string parent;
      for (size_t j = 0; j < i; ++j) parent += (j ? "." : "") + o.keys[j];
      diags.error(o.key_locs[i], quote(parent) + " is " + cur->kind_name() + ", not a mapping");
      return;
    }
    YNode* child = cur->get_mut(o.keys[i]);
    bool last = i + 1 == o.keys.size();
    if (!child) {
      YNode key;
      key.kind = YNode::Kind::Scalar;
      key.scalar = o.keys[i];
      key.loc = o.key_locs[i];
      YNode val;
      val.loc = o.key_locs[i];
      cur->map.emplace_back(std::move(key), std::move(val));
      child = &cur->map.back().second;
    }
    if (last) *child = o.value;
    cur = child;
  }
  // train.steps and train.epochs are alternatives: overriding one replaces the other written in the file.
  if (o.keys.size() == 2 && o.keys[0] == "train" && (o.keys[1] == "steps" || o.keys[1] == "epochs")) {
    YNode* train = root.get_mut("train");
    std::string other = o.keys[1] == "steps" ? "epochs" : "steps";
    if (train && train->is_map())
      std::erase_if(train->map, [&](const auto& kv) { return kv.first.is_scalar() && kv.first.scalar == other; });
  }
}

// ---- helpers for sections -----------------------------------------------------------------------------------

class Reader {
 public:
  Reader(const std::string& run_path, Diagnostics& diags) : run_path_(run_path), diags_(diags) {}
  VarEnv env;  // the model's vars: numbers in the run file may use them

  // A mapping section (`key` in `parent`), checked against `allowed`; nullptr when absent or not a mapping.
  const YNode* section(const YNode& parent, const std::string& key, const std::string& what,
                       const std::vector<std::string>& allowed) {
    const YNode* n = parent.get(key);
    if (!n) return nullptr;
    if (!n->is_map()) {
      diags_.error(n->loc, "expected a mapping for " + what + ", got " + n->kind_name());
      return nullptr;
    }
    check_keys(*n, allowed, what, diags_);
    return n;
  }

  std::optional<int64_t> integer(const YNode* m, const std::string& key, const std::string& what, int64_t min) {
    const YNode* v = m ? m->get(key) : nullptr;
    if (!v) return std::nullopt;
    auto r = eval_int(*v, env, what, diags_);
    if (r && *r < min) {
      diags_.error(v->loc, what + " must be at least " + std::to_string(min) + ", got " + std::to_string(*r));
      return std::nullopt;
    }
    return r;
  }

  // A number checked against [lo, hi) or (lo, hi) (open_lo) — hi may be infinite.
  std::optional<double> number(const YNode* m, const std::string& key, const std::string& what, double lo,
                               bool open_lo, double hi = std::numeric_limits<double>::infinity()) {
    const YNode* v = m ? m->get(key) : nullptr;
    return v ? number_at(*v, what, lo, open_lo, hi) : std::nullopt;
  }
  std::optional<double> number_at(const YNode& v, const std::string& what, double lo, bool open_lo, double hi) {
    auto r = eval_float(v, env, what, diags_);
    if (!r) return r;
    bool ok = (open_lo ? *r > lo : *r >= lo) && *r < hi;
    if (!ok) {
      std::string range = (open_lo ? "greater than " : "at least ") + fmt(lo);
      if (hi != std::numeric_limits<double>::infinity()) range += " and below " + fmt(hi);
      diags_.error(v.loc, what + " must be " + range + ", got " + v.scalar);
      return std::nullopt;
    }
    return r;
  }

  std::optional<bool> boolean(const YNode* m, const std::string& key, const std::string& what) {
    const YNode* v = m ? m->get(key) : nullptr;
    return v ? eval_bool(*v, what, diags_) : std::nullopt;
  }

  std::optional<std::string> string(const YNode* m, const std::string& key, const std::string& what) {
    const YNode* v = m ? m->get(key) : nullptr;
    return v ? eval_string(*v, what, diags_) : std::nullopt;
  }

  // One of `choices`, reported with did-you-mean otherwise.
  std::optional<std::string> choice(const YNode* m, const std::string& key, const std::string& what,
                                    const std::vector<std::string>& choices) {
    const YNode* v = m ? m->get(key) : nullptr;
    if (!v) return std::nullopt;
    auto s = eval_string(*v, what, diags_);
    if (!s) return s;
    if (std::find(choices.begin(), choices.end(), *s) != choices.end()) return s;
    std::string hint = did_you_mean_hint(*s, choices);
    diags_.error(v->loc, "unknown " + what + " " + quote(*s), hint.empty() ? "choose one of " + join(choices) : hint);
    return std::nullopt;
  }

  // A path relative to the run file (relative to the working directory when it came from --set).
  std::optional<std::string> path(const YNode* m, const std::string& key, const std::string& what,
                                  bool must_exist) {
    const YNode* v = m ? m->get(key) : nullptr;
    if (!v) return std::nullopt;
    auto s = eval_string(*v, what, diags_);
    if (!s) return s;
    if (s->empty()) {
      diags_.error(v->loc, what + " is empty");
      return std::nullopt;
    }
    std::string p = v->loc.file == kCmdLine ? *s : resolve_relative(*s, run_path_);
    if (must_exist && !file_exists(p)) diags_.error(v->loc, "data file not found: " + p, "paths are relative to the run file");
    return p;
  }

  void required(const YNode* m, const SourceLoc& loc, const std::string& key, const std::string& what) {
    if (m && !m->get(key)) diags_.error(loc, what + " needs " + quote(key));
  }

  Diagnostics& diags() { return diags_; }
  const std::string& run_path() const { return run_path_; }

 private:
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  std::string run_path_;
  Diagnostics& diags_;
};

// ---- sections -----------------------------------------------------------------------------------------------

DataSourceSpec read_source(Reader& r, const YNode& n, const std::string& what, const ModelSpec& model) {
  DataSourceSpec s;
  s.loc = n.loc;
  if (!n.is_map()) {
    r.diags().error(n.loc, "expected a mapping such as {format: idx, images: ..., labels: ...} for " + what +
                               ", got " + n.kind_name());
    return s;
  }
  const std::vector<std::string> formats = {"idx", "hdf5", "bytes", "tokens", "synthetic"};
  if (!n.get("format")) {
    r.diags().error(n.loc, what + " needs 'format'", "one of " + join(formats));
    return s;
  }
  auto format = r.choice(&n, "format", "data format", formats);
  if (!format) return s;
  s.format = *format;
  std::vector<std::string> allowed = {"format", "bind", "limit"};
  if (s.format == "idx") allowed.insert(allowed.end(), {"images", "labels"});
  if (s.format == "hdf5") allowed.insert(allowed.end(), {"path", "fields"});
  if (s.format == "bytes") allowed.insert(allowed.end(), {"path", "seq"});
  if (s.format == "tokens") allowed.insert(allowed.end(), {"path", "dtype", "seq"});
  if (s.format == "synthetic") allowed.insert(allowed.end(), {"samples"});
  check_keys(n, allowed, what + " (format " + s.format + ")", r.diags());
  std::string w = what + ".";
  if (s.format == "idx") {
    r.required(&n, n.loc, "images", what);
    r.required(&n, n.loc, "labels", what);
    s.images = r.path(&n, "images", w + "images", true).value_or("");
    s.labels = r.path(&n, "labels", w + "labels", true).value_or("");
  } else if (s.format == "hdf5" || s.format == "bytes" || s.format == "tokens") {
    r.required(&n, n.loc, "path", what);
    s.path = r.path(&n, "path", w + "path", true).value_or("");
  }
  if (s.format == "hdf5") {
    r.required(&n, n.loc, "fields", what);
    const YNode* f = n.get("fields");
    if (f && !f->is_map())
      r.diags().error(f->loc, "expected a mapping of field: /dataset for " + w + "fields, got " + f->kind_name());
    if (f && f->is_map()) {
      for (const auto& [k, v] : f->map)
        if (auto ds = eval_string(v, "the dataset of field " + quote(k.scalar), r.diags())) s.fields.emplace_back(k.scalar, *ds);
      if (f->map.empty()) r.diags().error(f->loc, w + "fields is empty", "e.g. fields: {image: /x, label: /y}");
    }
  }
  if (s.format == "bytes") s.seq = r.integer(&n, "seq", w + "seq", 1).value_or(0);
  if (s.format == "tokens") {  // both required: a token file has no header that could say them
    r.required(&n, n.loc, "dtype", what);
    r.required(&n, n.loc, "seq", what);
    s.token_dtype = r.choice(&n, "dtype", "token dtype", {"u16", "u32", "i32"}).value_or("");
    s.seq = r.integer(&n, "seq", w + "seq", 1).value_or(0);
  }
  if (s.format == "synthetic") s.samples = r.integer(&n, "samples", w + "samples", 1).value_or(s.samples);
  s.limit = r.integer(&n, "limit", w + "limit", 1).value_or(0);
  if (const YNode* b = n.get("bind")) {
    if (!b->is_map()) {
      r.diags().error(b->loc, "expected a mapping of field: input for " + w + "bind, got " + b->kind_name());
    } else {
      std::vector<std::string> inputs;
      for (const auto& in : model.inputs) inputs.push_back(in.name);
      for (const auto& [k, v] : b->map) {
        auto in = eval_string(v, "the input bound to field " + quote(k.scalar), r.diags());
        if (!in) continue;
        if (!inputs.empty() && std::find(inputs.begin(), inputs.end(), *in) == inputs.end())
          r.diags().error(v.loc, "the model has no input " + quote(*in), did_you_mean_hint(*in, inputs));
        s.bind.emplace_back(k.scalar, *in);
      }
    }
  }
  return s;
}

bool valid_devices(const std::string& d) {
  auto is_num = [](const std::string& s) {
    return !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (d == "cpu" || d == "cuda") return true;
  if (d.rfind("cpu:", 0) == 0) return is_num(d.substr(4)) && std::stol(d.substr(4)) >= 1;
  if (d.rfind("cuda:", 0) != 0) return false;
  std::string list = d.substr(5);
  if (list.empty()) return false;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, comma - start);
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      if (!is_num(item)) return false;
    } else {
      std::string a = item.substr(0, dash), b = item.substr(dash + 1);
      if (!is_num(a) || !is_num(b) || std::stol(a) > std::stol(b)) return false;
    }
    start = comma + 1;
  }
  return true;
}

void read_optimizer(Reader& r, const YNode& root, RunConfig& rc) {
  const YNode* o = root.get("optimizer");
  if (!o) {
    r.diags().error(root.loc, "missing required key 'optimizer'", "e.g. optimizer: {type: adamw, lr: 3.0e-4}");
    return;
  }
  if (!o->is_map()) {
    r.diags().error(o->loc, "expected a mapping for 'optimizer', got " + o->kind_name());
    return;
  }
  auto type = r.choice(o, "type", "optimizer type", {"sgd", "adamw"});
  if (!o->get("type")) r.diags().error(o->loc, "'optimizer' needs 'type'", "sgd or adamw");
  if (!type) return;
  OptimizerSpec& s = rc.optimizer;
  s.type = *type;
  std::vector<std::string> allowed = {"type", "lr", "weight_decay", "clip_grad_norm"};
  if (s.type == "sgd") allowed.insert(allowed.end(), {"momentum", "dampening", "nesterov"});
  else allowed.insert(allowed.end(), {"betas", "eps"});
  check_keys(*o, allowed, "'optimizer' (type " + s.type + ")", r.diags());
  r.required(o, o->loc, "lr", "'optimizer'");
  s.lr = r.number(o, "lr", "optimizer.lr", 0, true).value_or(0);
  s.weight_decay = r.number(o, "weight_decay", "optimizer.weight_decay", 0, false).value_or(s.type == "sgd" ? 0.0 : 0.01);
  if (o->get("clip_grad_norm")) s.clip_grad_norm = r.number(o, "clip_grad_norm", "optimizer.clip_grad_norm", 0, true);
  if (s.type == "sgd") {
    s.momentum = r.number(o, "momentum", "optimizer.momentum", 0, false).value_or(0);
    s.dampening = r.number(o, "dampening", "optimizer.dampening", 0, false, 1.0000001).value_or(0);
    s.nesterov = r.boolean(o, "nesterov", "optimizer.nesterov").value_or(false);
    if (s.nesterov && (s.momentum <= 0 || s.dampening != 0))
      r.diags().error(o->get("nesterov")->loc, "nesterov needs momentum above 0 and dampening 0");
    return;
  }
  s.eps = r.number(o, "eps", "optimizer.eps", 0, true).value_or(1e-8);
  if (const YNode* b = o->get("betas")) {
    if (!b->is_seq() || b->seq.size() != 2) {
      r.diags().error(b->loc, "expected two numbers for optimizer.betas, got " +
                                  (b->is_seq() ? std::to_string(b->seq.size()) + " items" : b->kind_name()),
                      "e.g. betas: [0.9, 0.999]");
    } else {
      for (int i = 0; i < 2; ++i)
        if (auto v = r.number_at(b->seq[i], "optimizer.betas[" + std::to_string(i) + "]", 0, false, 1.0)) s.betas[i] = *v;
    }
  }
}

void read_sections(Reader& r, const YNode& root, RunConfig& rc) {
  Diagnostics& d = r.diags();
  // data
  const YNode* data = root.get("data");
  if (!data) d.error(root.loc, "missing required key 'data'", "e.g. data: {train: {format: synthetic}}");
  if ((data = r.section(root, "data", "'data'", {"train", "eval", "shuffle"}))) {
    if (const YNode* t = data->get("train")) rc.data.train = read_source(r, *t, "data.train", rc.model);
    else d.error(data->loc, "'data' needs 'train'");
    if (const YNode* e = data->get("eval")) rc.data.eval = read_source(r, *e, "data.eval", rc.model);
    rc.data.shuffle = r.boolean(data, "shuffle", "data.shuffle").value_or(true);
  }
  // train
  const YNode* train = root.get("train");
  if (!train) d.error(root.loc, "missing required key 'train'", "e.g. train: {batch: 64, steps: 1000}");
  if ((train = r.section(root, "train", "'train'", {"batch", "micro_batch", "steps", "epochs", "seed", "precision"}))) {
    TrainSpec& t = rc.train;
    r.required(train, train->loc, "batch", "'train'");
    t.batch = r.integer(train, "batch", "train.batch", 1).value_or(0);
    t.micro_batch = r.integer(train, "micro_batch", "train.micro_batch", 1);
    t.steps = r.integer(train, "steps", "train.steps", 1);
    t.epochs = r.integer(train, "epochs", "train.epochs", 1);
    if (auto seed = r.integer(train, "seed", "train.seed", 0)) t.seed = static_cast<uint64_t>(*seed);
    t.precision = r.choice(train, "precision", "precision", {"f32", "bf16", "f16"}).value_or("f32");
    if (!train->get("steps") && !train->get("epochs"))
      d.error(train->loc, "'train' needs 'steps' or 'epochs'");
    if (train->get("steps") && train->get("epochs"))
      d.error(*train->key_loc("epochs"), "'train' has both 'steps' and 'epochs'", "give one of them");
    if (t.micro_batch && t.batch > 0 && t.batch % *t.micro_batch != 0)
      d.error(train->get("micro_batch")->loc, "train.micro_batch " + std::to_string(*t.micro_batch) +
                                                  " does not divide train.batch " + std::to_string(t.batch));
  }
  // optimizer and schedule
  read_optimizer(r, root, rc);
  if (const YNode* s = root.get("lr_schedule"); s && s->is_map()) {
    auto type = r.choice(s, "type", "lr_schedule type", {"constant", "step", "cosine"});
    rc.lr_schedule.type = type.value_or("constant");
    std::vector<std::string> allowed = {"type"};
    if (rc.lr_schedule.type == "step") allowed.insert(allowed.end(), {"step_size", "gamma"});
    if (rc.lr_schedule.type == "cosine") allowed.insert(allowed.end(), {"warmup_steps", "min_lr"});
    if (type || !s->get("type")) check_keys(*s, allowed, "'lr_schedule' (type " + rc.lr_schedule.type + ")", d);
    LrScheduleSpec& l = rc.lr_schedule;
    l.step_size = r.integer(s, "step_size", "lr_schedule.step_size", 1).value_or(l.step_size);
    l.gamma = r.number(s, "gamma", "lr_schedule.gamma", 0, true).value_or(l.gamma);
    l.warmup_steps = r.integer(s, "warmup_steps", "lr_schedule.warmup_steps", 0).value_or(l.warmup_steps);
    l.min_lr = r.number(s, "min_lr", "lr_schedule.min_lr", 0, false).value_or(l.min_lr);
    if (s->get("min_lr") && rc.optimizer.lr > 0 && l.min_lr > rc.optimizer.lr)
      d.error(s->get("min_lr")->loc, "lr_schedule.min_lr is above optimizer.lr");
  } else if (s) {
    d.error(s->loc, "expected a mapping for 'lr_schedule', got " + s->kind_name());
  }
  // devices
  if (const YNode* dev = root.get("devices")) {
    if (auto s = eval_string(*dev, "'devices'", d)) {
      bool file = s->size() > 5 && (s->ends_with(".yaml") || s->ends_with(".yml"));
      if (file) {
        rc.devices = dev->loc.file == kCmdLine ? *s : resolve_relative(*s, r.run_path());
        if (!file_exists(rc.devices)) d.error(dev->loc, "cluster file not found: " + rc.devices);
      } else if (valid_devices(*s)) {
        rc.devices = *s;
      } else {
        d.error(dev->loc, "bad devices " + quote(*s), "cpu, cpu:N, cuda, cuda:0-7, cuda:0,1 or a cluster file (.yaml)");
      }
    }
  }
  // parallel, checkpoint, log, eval
  if (const YNode* p = r.section(root, "parallel", "'parallel'", {"plan", "schedule", "sync_batch_norm"})) {
    if (auto plan = r.string(p, "plan", "parallel.plan"))
      rc.parallel.plan = *plan == "auto" || p->get("plan")->loc.file == kCmdLine ? *plan : resolve_relative(*plan, r.run_path());
    rc.parallel.schedule = r.choice(p, "schedule", "pipeline schedule", {"gpipe", "1f1b", "interleaved"}).value_or("1f1b");
    rc.parallel.sync_batch_norm = r.boolean(p, "sync_batch_norm", "parallel.sync_batch_norm").value_or(false);
  }
  if (const YNode* c = r.section(root, "checkpoint", "'checkpoint'", {"dir", "every_steps", "keep"})) {
    rc.checkpoint.dir = r.path(c, "dir", "checkpoint.dir", false).value_or("");
    rc.checkpoint.every_steps = r.integer(c, "every_steps", "checkpoint.every_steps", 0).value_or(0);
    rc.checkpoint.keep = r.integer(c, "keep", "checkpoint.keep", 1).value_or(3);
  }
  if (const YNode* l = r.section(root, "log", "'log'", {"every_steps", "metrics"})) {
    rc.log.every_steps = r.integer(l, "every_steps", "log.every_steps", 1).value_or(10);
    rc.log.metrics = r.path(l, "metrics", "log.metrics", false).value_or("");
  }
  if (rc.log.metrics.empty() && !rc.checkpoint.dir.empty()) rc.log.metrics = rc.checkpoint.dir + "/metrics.jsonl";
  if (const YNode* e = r.section(root, "eval", "'eval'", {"every_steps", "batches"})) {
    rc.eval.every_steps = r.integer(e, "every_steps", "eval.every_steps", 0).value_or(0);
    rc.eval.batches = r.integer(e, "batches", "eval.batches", 0).value_or(0);
  }
}

// ---- text after overrides -----------------------------------------------------------------------------------

std::string scalar_text(const YNode& n) {
  if (n.is_null()) return "null";
  bool plain_ok = !n.quoted && !n.scalar.empty() && n.scalar.find_first_of("\n\"#") == std::string::npos &&
                  n.scalar.find(": ") == std::string::npos && std::string("[]{},&*!|>'%@`-?:").find(n.scalar[0]) == std::string::npos;
  if (plain_ok || (!n.quoted && n.scalar[0] == '-' && n.scalar.size() > 1 && n.scalar[1] != ' ')) return n.scalar;
  std::string out = "\"";
  for (char c : n.scalar) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + "\"";
}

void emit(const YNode& n, int indent, std::string& out) {
  std::string pad(indent, ' ');
  auto inline_ok = [](const YNode& x) {
    if (x.is_map() || x.is_seq())
      return (x.is_seq() && std::all_of(x.seq.begin(), x.seq.end(), [](const YNode& y) { return !y.is_map() && !y.is_seq(); })) ||
             (x.map.empty() && x.seq.empty());
    return true;
  };
  auto inline_text = [](const YNode& x) {
    if (x.is_map()) return std::string("{}");
    if (!x.is_seq()) return scalar_text(x);
    std::string s = "[";
    for (size_t i = 0; i < x.seq.size(); ++i) s += (i ? ", " : "") + scalar_text(x.seq[i]);
    return s + "]";
  };
  if (n.is_map()) {
    for (const auto& [k, v] : n.map) {
      out += pad + scalar_text(k) + ":";
      if (inline_ok(v)) out += " " + inline_text(v) + "\n";
      else out += "\n", emit(v, indent + 2, out);
    }
  } else if (n.is_seq()) {
    for (const auto& item : n.seq) {
      if (inline_ok(item)) out += pad + "- " + inline_text(item) + "\n";
      else out += pad + "-\n", emit(item, indent + 2, out);
    }
  } else {
    out += pad + scalar_text(n) + "\n";
  }
}

// Messages of diagnostics located on the command line start with the --set they come from.
void add_all(const Diagnostics& from, const std::vector<std::string>& sets, Diagnostics& to) {
  for (const auto& d : from.all()) {
    std::string message = d.message;
    if (d.loc.file == kCmdLine && d.loc.line >= 1 && static_cast<size_t>(d.loc.line) <= sets.size()) {
      // The --set as given, cut past 80 characters (a 10,000-parenthesis value printed whole buried the error).
      const std::string& set = sets[static_cast<size_t>(d.loc.line - 1)];
      message = "--set " + (set.size() > 80 ? set.substr(0, 80) + "... (" + std::to_string(set.size()) + " characters)" : set) +
                ": " + message;
    }
    to.error(d.loc, message, d.hint);
  }
}

// load_run_or_model's work; every error goes to `diags` (without the --set prefixes add_all gives them).
RunConfig load(const std::string& path, const std::vector<std::string>& sets, Diagnostics& diags) {
  RunConfig rc;
  rc.model.inputs_known = false;  // until a model is read
  std::string text;
  try {
    text = read_file(path, YamlLimits{}.max_bytes);
  } catch (const UserError& e) {
    diags.merge(e);  // read_file's own message: no such file, not a regular file, too large, unreadable
    rc.is_model_only = true;
    return rc;
  }
  YNode root = parse_yaml(text, path, diags);
  if (!diags.empty()) {
    rc.is_model_only = !(root.is_map() && root.get("model"));
    return rc;
  }
  std::vector<SetOverride> overrides;
  for (size_t i = 0; i < sets.size(); ++i)
    if (auto o = parse_set(sets[i], i, diags)) overrides.push_back(std::move(*o));

  // A run file has `model:`; a file with run sections but no model key is a run file missing it.
  bool is_run = root.is_map() && root.get("model");
  if (root.is_map() && !is_run) {
    bool run_keys = false, model_keys = false;
    for (const auto& k : root.keys()) {
      run_keys |= std::find(kRunKeys.begin(), kRunKeys.end(), k) != kRunKeys.end() && k != "vars";
      model_keys |= std::find(kModelOnlyKeys.begin(), kModelOnlyKeys.end(), k) != kModelOnlyKeys.end();
    }
    is_run = run_keys && !model_keys;
  }

  if (!is_run) {  // a bare model file: only vars may be set
    std::vector<VarOverride> vars;
    for (const auto& o : overrides) {
      if (o.keys.size() == 2 && o.keys[0] == "vars") vars.push_back(VarOverride{o.keys[1], o.value, o.key_locs[1]});
      else diags.error(o.key_locs[0], "this is a model file; only vars.NAME may be set", "--set vars.NAME=VALUE");
    }
    rc.is_model_only = true;
    rc.model_path = path;
    rc.model = parse_model_tree(root, text, path, vars, diags);
    return rc;
  }

  // 1. overrides grafted onto the tree, 2. top-level keys, 3. the model with the run's vars, 4. sections
  for (const auto& o : overrides) apply_set(root, o, diags);
  rc.path = path;
  emit(root, 0, rc.text);
  check_keys(root, kRunKeys, "the run file", diags);
  Reader r(path, diags);
  std::vector<VarOverride> vars;
  if (const YNode* v = root.get("vars")) {
    if (!v->is_map() && !v->is_null())
      diags.error(v->loc, "expected a mapping of var: value for 'vars', got " + v->kind_name());
    for (const auto& [k, val] : v->map) vars.push_back(VarOverride{k.scalar, val, k.loc});
  }
  if (const YNode* m = root.get("model")) {
    if (auto s = eval_string(*m, "'model'", diags)) {
      rc.model_path = m->loc.file == kCmdLine ? *s : resolve_relative(*s, path);
      rc.model = load_model(rc.model_path, vars, diags, m->loc);
    }
  } else {
    diags.error(root.loc, "missing required key 'model'", "e.g. model: ../models/mlp.yaml");
  }
  r.env = rc.model.vars;
  read_sections(r, root, rc);
  return rc;
}

}  // namespace

RunConfig load_run_or_model(const std::string& path, const std::vector<std::string>& sets, Diagnostics& diags) {
  Diagnostics local;
  RunConfig rc = load(path, sets, local);
  add_all(local, sets, diags);
  return rc;
}

RunConfig load_run_or_model(const std::string& path, const std::vector<std::string>& sets) {
  Diagnostics diags;
  RunConfig rc = load_run_or_model(path, sets, diags);
  diags.throw_if_any();
  return rc;
}

}  // namespace braid::io
