// Environment detection (see env.h). Every number is parsed strictly (no trailing junk, in range) and every
// error names the variable and its value.
#include "distributed/env.h"

#include <cstdlib>

#include "core/error.h"

namespace braid::dist {

namespace {

[[noreturn]] void bad(const std::string& msg, const std::string& hint = "") { throw UserError({}, msg, hint); }

struct Vars {
  const EnvLookup& env;
  std::optional<std::string> get(const std::string& name) const {
    auto v = env(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  int integer(const std::string& name, int lo, int hi) const {
    const auto v = get(name);
    if (!v) bad(BRAID_STR(name, " is not set"));
    return parse(name, *v, lo, hi);
  }
  std::optional<int> maybe(const std::string& name, int lo, int hi) const {
    const auto v = get(name);
    if (!v) return std::nullopt;
    return parse(name, *v, lo, hi);
  }
  static int parse(const std::string& name, const std::string& v, int lo, int hi) {
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(v, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) bad(BRAID_STR(name, "='", v, "' is not an integer"));
    if (x < lo || x > hi) bad(BRAID_STR(name, "=", v, " is out of range [", lo, ", ", hi, "]"));
    return static_cast<int>(x);
  }
};

constexpr int kMaxRanks = 1 << 24;

void check(DistEnv& e, const std::string& rank_var, const std::string& size_var, const std::string& lrank_var,
           const std::string& lsize_var) {
  if (e.rank >= e.world_size)
    bad(BRAID_STR(rank_var, "=", e.rank, " is not below ", size_var, "=", e.world_size));
  if (e.local_rank >= e.local_world_size)
    bad(BRAID_STR(lrank_var, "=", e.local_rank, " is not below ", lsize_var, "=", e.local_world_size));
  if (e.local_world_size > e.world_size)
    bad(BRAID_STR(lsize_var, "=", e.local_world_size, " exceeds ", size_var, "=", e.world_size));
  if (e.local_rank > e.rank)
    bad(BRAID_STR(lrank_var, "=", e.local_rank, " exceeds ", rank_var, "=", e.rank),
        "the local rank counts the processes of one node, so it cannot exceed the global rank");
}

void master_from(const Vars& v, DistEnv& e, bool required, const std::string& family_hint) {
  const auto addr = v.get("MASTER_ADDR");
  const auto port = v.maybe("MASTER_PORT", 1, 65535);
  if (addr) e.master_addr = *addr;
  if (port) e.master_port = *port;
  if (required && e.world_size > 1 && (!addr || !port))
    bad(BRAID_STR(e.source, " job of ", e.world_size, " processes without ", !addr ? "MASTER_ADDR" : "MASTER_PORT"),
        family_hint);
}

}  // namespace

std::string DistEnv::str() const {
  return BRAID_STR("rank ", rank, " of ", world_size, " (local ", local_rank, " of ", local_world_size, ", node ",
                   node_rank, ") via ", source, ", store at ", master_addr, ":", master_port,
                   store_hosted ? " (served by the launcher)" : "");
}

DistEnv detect_env(const EnvLookup& env) {
  const Vars v{env};
  DistEnv e;
  if (v.get("RANK") || v.get("WORLD_SIZE")) {
    e.source = v.get("BRAID_LAUNCHED") ? "braid launch" : "torchrun";
    e.rank = v.integer("RANK", 0, kMaxRanks);
    e.world_size = v.integer("WORLD_SIZE", 1, kMaxRanks);
    e.local_rank = v.maybe("LOCAL_RANK", 0, kMaxRanks).value_or(e.world_size == 1 ? 0 : -1);
    e.local_world_size = v.maybe("LOCAL_WORLD_SIZE", 1, kMaxRanks).value_or(0);
    if (e.local_rank < 0) bad("RANK and WORLD_SIZE are set but LOCAL_RANK is not", "torchrun sets all of them");
    if (e.local_world_size == 0) e.local_world_size = e.world_size;  // one node
    check(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    e.node_rank = v.maybe("GROUP_RANK", 0, kMaxRanks).value_or(e.rank / e.local_world_size);
    master_from(v, e, true, "torchrun and braid launch set both");
  } else if (v.get("SLURM_PROCID")) {
    e.source = "slurm";
    e.rank = v.integer("SLURM_PROCID", 0, kMaxRanks);
    e.world_size = v.maybe("SLURM_NTASKS", 1, kMaxRanks).value_or(0);
    if (!e.world_size) e.world_size = v.integer("SLURM_NPROCS", 1, kMaxRanks);
    e.local_rank = v.integer("SLURM_LOCALID", 0, kMaxRanks);
    // SLURM_NTASKS_PER_NODE when given; else the first count of SLURM_TASKS_PER_NODE ("4(x2),3").
    auto per_node = v.maybe("SLURM_NTASKS_PER_NODE", 1, kMaxRanks);
    if (!per_node) {
      if (auto t = v.get("SLURM_TASKS_PER_NODE")) {
        const std::string first = t->substr(0, t->find_first_of("(,"));
        per_node = Vars::parse("SLURM_TASKS_PER_NODE", first, 1, kMaxRanks);
      }
    }
    e.local_world_size = per_node.value_or(e.world_size);
    check(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
    e.node_rank = v.maybe("SLURM_NODEID", 0, kMaxRanks).value_or(e.rank / e.local_world_size);
    auto list = v.get("SLURM_STEP_NODELIST");
    if (!list) list = v.get("SLURM_JOB_NODELIST");
    if (!list) list = v.get("SLURM_NODELIST");
    if (list) {
      const auto hosts = expand_nodelist(*list);
      if (hosts.empty()) bad(BRAID_STR("the Slurm node list '", *list, "' names no host"));
      e.master_addr = hosts.front();
    } else if (e.world_size > 1 && !v.get("MASTER_ADDR")) {
      bad("Slurm job without a node list (SLURM_JOB_NODELIST) or MASTER_ADDR");
    }
    if (auto id = v.maybe("SLURM_JOB_ID", 0, 2147483647)) e.master_port = kDefaultMasterPort + *id % 20000;
    master_from(v, e, false, "");
  } else if (v.get("OMPI_COMM_WORLD_RANK") || v.get("OMPI_COMM_WORLD_SIZE")) {
    e.source = "openmpi";
    e.rank = v.integer("OMPI_COMM_WORLD_RANK", 0, kMaxRanks);
    e.world_size = v.integer("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    e.local_rank = v.maybe("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks).value_or(e.rank);
    e.local_world_size = v.maybe("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks).value_or(e.world_size);
    check(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    e.node_rank = e.rank / e.local_world_size;
    const bool one_node = e.local_world_size == e.world_size;
    master_from(v, e, !one_node, "Open MPI does not say where rank 0 runs: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500");
  }
  if (auto h = v.get("BRAID_STORE_HOSTED")) e.store_hosted = *h == "1";
  if (auto hb = v.maybe("BRAID_HEARTBEAT_MS", 0, 3'600'000)) e.heartbeat_ms = *hb;
  return e;
}

DistEnv detect_env() {
  return detect_env([](const std::string& name) -> std::optional<std::string> {
    const char* s = std::getenv(name.c_str());
    if (!s) return std::nullopt;
    return std::string(s);
  });
}

std::vector<std::string> expand_nodelist(const std::string& list) {
  std::vector<std::string> out;
  // Split at commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) bad(BRAID_STR("node list '", list, "': unbalanced ']'"));
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) bad(BRAID_STR("node list '", list, "': unbalanced '['"));
  items.push_back(cur);
  for (const auto& item : items) {
    if (item.empty()) bad(BRAID_STR("node list '", list, "': empty host name"));
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      out.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    const std::string prefix = item.substr(0, open), body = item.substr(open + 1, close - open - 1);
    const std::string rest = item.substr(close + 1);
    const std::vector<std::string> tails = rest.empty() ? std::vector<std::string>{""} : expand_nodelist(rest);
    size_t pos = 0;
    while (pos <= body.size()) {
      const size_t comma = std::min(body.find(',', pos), body.size());
      const std::string range = body.substr(pos, comma - pos);
      const size_t dash = range.find('-');
      const std::string lo_s = range.substr(0, dash), hi_s = dash == std::string::npos ? lo_s : range.substr(dash + 1);
      auto digits = [&](const std::string& s) {
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
          bad(BRAID_STR("node list '", list, "': '", range, "' is not a number or a range a-b"));
        return std::stoi(s);
      };
      const int lo = digits(lo_s), hi = digits(hi_s);
      if (hi < lo) bad(BRAID_STR("node list '", list, "': range ", range, " runs backwards"));
      if (hi - lo > 100000) bad(BRAID_STR("node list '", list, "': range ", range, " is too long"));
      for (int i = lo; i <= hi; ++i) {
        std::string num = std::to_string(i);
        if (num.size() < lo_s.size()) num.insert(0, lo_s.size() - num.size(), '0');
        for (const auto& t : tails) out.push_back(prefix + num + t);
      }
      pos = comma + 1;
    }
  }
  return out;
}

}  // namespace braid::dist
