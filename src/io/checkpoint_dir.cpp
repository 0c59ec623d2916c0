// Checkpoint folders (step_<8 digits>.h5 files and the `latest` pointer, replaced atomically after the file
// it names is complete) and the text of `braid inspect`. `latest` only ever holds a bare file name of the
// same folder; anything else in it is reported, never followed. Pruning never deletes what `latest` names.
#include "core/finite.h"
#include "core/format.h"

#include "core/resource_error.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "io/checkpoint.h"
#include "io/h5util.h"

namespace braid::io {

namespace fs = std::filesystem;

namespace {

const std::regex& step_file_re() {
  static const std::regex re(R"(step_(\d{8,18})\.h5)");
  return re;
}

// Temporaries of step files and of `latest`: ".<name>.tmp-<pid>-<n>" (h5::temp_name).
const std::regex& temp_file_re() {
  static const std::regex re(R"(\.(step_\d{8,18}\.h5|latest)\.tmp-(\d+)-\d+)");
  return re;
}

// Printable, short form of untrusted bytes for messages.
std::string shown_bytes(const std::string& s) {
  std::string out;
  for (unsigned char ch : s.substr(0, 60)) {
    if (ch >= 0x20 && ch < 0x7f) out += static_cast<char>(ch);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return s.size() > 60 ? out + "..." : out;
}

[[noreturn]] void bad_write(const std::string& path, const std::string& what) {
  const int err = errno;
  throw_os_error(err, SourceLoc{}, "cannot write '" + path + "': " + what + ": " + std::strerror(err));
}

// `text` into `path` atomically: temporary in the same folder, fsync, rename, fsync of the folder.
void write_small_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = h5::temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) bad_write(path, "cannot create '" + tmp + "'");
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) {
    std::string dir = fs::path(path).parent_path().string();
    h5::fsync_path(dir.empty() ? "." : dir, true, path);
    return;
  }
  if (!ok && err) errno = err;
  int saved = errno;
  ::unlink(tmp.c_str());
  errno = saved;
  bad_write(path, "cannot write or rename its temporary '" + tmp + "'");
}


}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1)
    throw UserError(SourceLoc{}, "checkpoint folder '" + dir_ + "': keep must be at least 1, not " +
                                     std::to_string(keep_));
}

std::string CheckpointDir::file_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

std::string CheckpointDir::save(const Checkpoint& c) {
  if (c.meta.step < 0) throw UserError(SourceLoc{}, "cannot save a checkpoint of negative step " + std::to_string(c.meta.step));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw UserError(SourceLoc{}, "cannot create the checkpoint folder '" + dir_ + "': " + ec.message());
  const std::string name = file_name(c.meta.step);
  const std::string path = (fs::path(dir_) / name).string();
  // 1. The checkpoint file, complete and synced; 2. `latest`, only then; 3. pruning, failures ignored (the
  // files it leaves are complete checkpoints).
  write_checkpoint(path, c);
  write_small_file_atomically((fs::path(dir_) / "latest").string(), name + "\n");
  std::vector<std::string> files = list();
  int64_t excess = static_cast<int64_t>(files.size()) - keep_;
  for (const std::string& f : files) {
    if (excess <= 0) break;
    if (fs::path(f).filename() == name) continue;
    if (fs::remove(f, ec)) --excess;
  }
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    std::string base = it->path().filename().string();
    if (!std::regex_match(base, m, temp_file_re())) continue;
    long pid = std::stol(m[2].str());
    if (pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
  return path;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    std::string base = it->path().filename().string();
    if (std::regex_match(base, m, step_file_re())) found.emplace_back(std::stoll(m[1].str()), it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, p] : found) out.push_back(p);
  return out;
}

std::string CheckpointDir::latest() const {
  const std::string p = (fs::path(dir_) / "latest").string();
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return "";
    throw UserError(SourceLoc{p}, std::string("cannot read: ") + std::strerror(errno));
  }
  const std::string hint = "`latest` holds the name of a step_XXXXXXXX.h5 file of its folder; remove it to start "
                           "over, or write the name of a complete checkpoint into it";
  if (!S_ISREG(st.st_mode)) throw UserError(SourceLoc{p}, "is not a regular file", hint);
  std::ifstream in(p, std::ios::binary);
  std::string text(256, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw UserError(SourceLoc{p}, std::string("cannot read: ") + std::strerror(errno));
  text.resize(static_cast<size_t>(in.gcount()));
  std::string name = text;
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (!std::regex_match(name, step_file_re()) || st.st_size > 200)
    throw UserError(SourceLoc{p}, "does not name a checkpoint file (it holds '" + shown_bytes(text) + "')", hint);
  const std::string target = (fs::path(dir_) / name).string();
  if (::stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw UserError(SourceLoc{p}, "names '" + name + "', which does not exist in '" + dir_ + "'", hint);
  return target;
}

std::string CheckpointDir::resolve(const std::string& dir, const std::string& spec) {
  auto latest_of = [](const std::string& d, const std::string& what) {
    std::string l = CheckpointDir(d, 1).latest();
    if (l.empty())
      throw UserError(SourceLoc{}, "no checkpoint to use in '" + d + "' (" + what + " has no file 'latest')",
                      "checkpoints are written there by `braid train` with checkpoint.dir set");
    return l;
  };
  if (spec == "latest") {
    if (dir.empty())
      throw UserError(SourceLoc{}, "'latest' needs a checkpoint folder (checkpoint.dir in the run file)");
    return latest_of(dir, "the checkpoint folder");
  }
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return latest_of(spec, "the folder");
  if (fs::path(spec).filename() == "latest" && fs::is_regular_file(spec, ec)) {  // the pointer itself
    std::string parent = fs::path(spec).parent_path().string();
    return latest_of(parent.empty() ? "." : parent, "the folder");
  }
  if (!fs::exists(spec, ec)) throw UserError(SourceLoc{}, "checkpoint '" + spec + "' does not exist");
  return spec;
}

std::string inspect_checkpoint(const std::string& path) { return describe_checkpoint(path, read_checkpoint(path)); }

std::string describe_checkpoint(const std::string& path, const Checkpoint& c) {
  const CheckpointMeta& m = c.meta;
  std::string out;
  auto line = [&](const char* fmt, auto... args) {
    int n = std::snprintf(nullptr, 0, fmt, args...);
    std::string s(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    std::snprintf(s.data(), s.size(), fmt, args...);
    s.pop_back();
    out += s;
  };
  line("checkpoint %s (format %d, braid %s, created %s)\n", path.c_str(), m.format_version, m.braid_version.c_str(),
       m.created.c_str());
  line("step %lld, epoch %lld, %lld samples seen, %.1f s of training\n", static_cast<long long>(m.step),
       static_cast<long long>(m.epoch), static_cast<long long>(m.samples_seen), m.wall_time_s);
  line("run   %s (hash %s)\n", m.run_path.empty() ? "(none)" : m.run_path.c_str(), m.run_hash.c_str());
  line("model %s (hash %s)\n", m.model_path.empty() ? "(none)" : m.model_path.c_str(), m.model_hash.c_str());
  line("optimizer %s, %lld steps; data: epoch %lld, position %lld, seed %llu\n",
       c.optimizer_type.empty() ? "(none)" : c.optimizer_type.c_str(), static_cast<long long>(c.optimizer_steps),
       static_cast<long long>(c.data.epoch), static_cast<long long>(c.data.position),
       static_cast<unsigned long long>(c.data.seed));
  if (c.loss_scale > 0)
    line("loss scale %g (fp16), %lld steps without an overflow\n", c.loss_scale,
         static_cast<long long>(c.loss_scale_growth_tracker));
  std::string streams;
  for (const auto& r : c.rng) streams += (streams.empty() ? "" : ", ") + r.name;
  line("random streams: %s\n", streams.empty() ? "(none)" : streams.c_str());
  if (!c.plan_text.empty()) line("plan: %zu bytes of text (/plan)\n", c.plan_text.size());

  struct Row {
    std::string name, shape, dtype, size, checksum, note;
  };
  std::vector<std::string> non_finite;
  std::vector<Row> rows;
  double sizes[3] = {0, 0, 0};
  int64_t counts[3] = {0, 0, 0};
  auto add = [&](const std::string& name, const Tensor& t, int kind) {
    rows.push_back(Row{name, t.shape().str(), std::string(dtype_name(t.dtype())), human_bytes(static_cast<double>(t.bytes())),
                       tensor_checksum(t)});
    if (const NonFinite nf = find_non_finite(t); nf.count > 0) {
      rows.back().note = "  " + describe(nf);
      non_finite.push_back(name);
    }
    sizes[kind] += static_cast<double>(t.bytes());
    counts[kind] += t.numel();
  };
  for_each_tensor(c, add);
  size_t w[4] = {6, 5, 5, 4};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.name.size());
    w[1] = std::max(w[1], r.shape.size());
    w[2] = std::max(w[2], r.dtype.size());
    w[3] = std::max(w[3], r.size.size());
  }
  auto row = [&](const Row& r) {
    out += r.name + std::string(w[0] - r.name.size() + 2, ' ') + r.shape + std::string(w[1] - r.shape.size() + 2, ' ') +
           r.dtype + std::string(w[2] - r.dtype.size() + 2, ' ') + std::string(w[3] - r.size.size(), ' ') + r.size +
           "  " + r.checksum + r.note + "\n";
  };
  out += "\n";
  row(Row{"tensor", "shape", "dtype", "size", "checksum"});
  for (const auto& r : rows) row(r);
  out += "\n";
  line("parameters: %zu tensors, %lld values (%s); buffers: %zu tensors (%s); optimizer state: %zu tensors (%s)\n",
       c.params.size(), static_cast<long long>(counts[0]), human_bytes(sizes[0]).c_str(), c.buffers.size(),
       human_bytes(sizes[1]).c_str(), c.optimizer.size(), human_bytes(sizes[2]).c_str());
  line("all %zu checksums verified\n", rows.size() + c.rng.size());
  if (!non_finite.empty()) {
    std::string names;
    for (const auto& n : non_finite) names += (names.empty() ? "" : ", ") + n;
    line("NON-FINITE: %zu tensor(s) hold NaN or Inf (%s): the run had diverged when it saved this; "
         "braid train refuses to resume from it or start from it\n", non_finite.size(), names.c_str());
  }
  return out;
}

}  // namespace braid::io
