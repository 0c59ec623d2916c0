// JSON-lines metrics: one flushed line per record.
#include "io/metrics.h"

#include "core/resource_error.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/json.h"

namespace braid::io {

std::string metrics_json(const MetricsRecord& r) {
  JsonWriter w;
  w.begin_object().field("step", r.step);
  if (!r.kind.empty()) w.field("kind", r.kind);
  if (r.loss) w.field("loss", *r.loss);
  if (r.lr) w.field("lr", *r.lr);
  if (r.samples_per_s) w.field("samples_per_s", *r.samples_per_s);
  for (size_t i = 0; i < r.extra.size(); ++i) {
    const std::string& name = r.extra[i].first;
    BRAID_ASSERT(name != "step" && name != "kind" && name != "loss" && name != "lr" && name != "samples_per_s",
                 "metrics: extra '", name, "' shadows a fixed field");
    for (size_t j = 0; j < i; ++j) BRAID_ASSERT(r.extra[j].first != name, "metrics: extra '", name, "' twice");
    w.field(name, r.extra[i].second);
  }
  w.end_object();
  return w.str();
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  const int err = errno;
  if (!f_) throw_os_error(err, SourceLoc{path, 0, 0}, std::string("cannot open metrics file: ") + std::strerror(err));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const MetricsRecord& r) {
  std::string line = metrics_json(r);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    const int err = errno;  // ENOSPC: a full disk, exit status 1 (core/resource_error.h)
    throw_os_error(err, SourceLoc{path_, 0, 0}, std::string("cannot write metrics: ") + std::strerror(err));
  }
}

}  // namespace braid::io
