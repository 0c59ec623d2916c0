// The idx format: MNIST / Fashion-MNIST image and label files (http://yann.lecun.com/exdb/mnist/), gzip or
// plain (zlib's gzread tells them apart by the gzip magic and reads both). Only unsigned-byte data (type
// 0x08) is supported: images become floats in [0, 1] reshaped to the input's shape, labels integers.
// Files are read whole into memory once and validated (magic, dims, exact length, matching counts).
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "io/datasets/source.h"

namespace braid::io::data {

namespace {

struct IdxFile {
  std::vector<int64_t> dims;  // dims[0] = samples
  std::shared_ptr<std::vector<uint8_t>> data;
};

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }
  // Reads up to n bytes; returns the count, or -1 on a zlib error.
  int64_t read(uint8_t* dst, int64_t n) {
    int64_t done = 0;
    while (done < n) {
      auto chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
      int got = gzread(f_, dst + done, chunk);
      if (got < 0) return -1;
      if (got == 0) break;
      done += got;
    }
    return done;
  }
  std::string error() const {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    return code == Z_ERRNO ? std::strerror(errno) : (msg ? msg : "unknown zlib error");
  }

 private:
  gzFile f_;
};

// role: "images" (rank >= 2) or "labels" (rank 1).
IdxFile read_idx(const LoadContext& c, const std::string& path, const std::string& role) {
  const bool labels = role == "labels";
  const std::string what = "idx " + role + " file '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) c.fail(what + " does not exist or is not a file");
  GzFile f(path);
  if (!f.get()) c.fail("cannot open " + what + ": " + std::strerror(errno));

  uint8_t magic[4];
  int64_t got = f.read(magic, 4);
  if (got < 0) c.fail("cannot read " + what + ": " + f.error());
  if (got < 4) c.fail(what + " is truncated: " + std::to_string(got) + " bytes, shorter than the 4-byte magic");
  uint32_t m = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) | (uint32_t{magic[2]} << 8) | magic[3];
  const std::string expected = labels ? "0x00000801" : "0x00000803";
  const std::string hint = "MNIST-style files start with 0x00000803 (images) or 0x00000801 (labels)";
  if (magic[0] != 0 || magic[1] != 0)
    c.fail(what + " is not an IDX file: magic " + hex32(m) + ", expected " + expected, hint);
  if (magic[2] != 0x08)
    c.fail(what + " holds element type " + hex32(magic[2]) + "; only unsigned bytes (0x08) are supported");
  int rank = magic[3];
  if (labels && rank != 1)
    c.fail(what + " has " + std::to_string(rank) + " dimensions (magic " + hex32(m) + "); labels have 1, expected " +
               expected,
           rank >= 2 ? "are 'images' and 'labels' swapped?" : hint);
  if (!labels && rank < 2)
    c.fail(what + " has " + std::to_string(rank) + " dimension(s) (magic " + hex32(m) + "); images have at least 2, expected " +
               expected,
           rank == 1 ? "are 'images' and 'labels' swapped?" : hint);

  std::vector<uint8_t> header(static_cast<size_t>(rank) * 4);
  got = f.read(header.data(), static_cast<int64_t>(header.size()));
  if (got < 0) c.fail("cannot read " + what + ": " + f.error());
  if (got < static_cast<int64_t>(header.size())) c.fail(what + " is truncated inside its header");
  IdxFile out;
  int64_t total = 1;
  for (int a = 0; a < rank; ++a) {
    const uint8_t* p = header.data() + 4 * a;
    int64_t d = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3];
    out.dims.push_back(d);
    if (d != 0 && total > (int64_t{1} << 40) / d) c.fail(what + " claims an impossible size " + Shape(out.dims).str());
    total *= d;
  }
  // Deflate expands at most ~1032x: a header claiming more than that is corrupt, whatever it says.
  auto disk = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (!ec && total > disk * 1032 + 4096)
    c.fail(what + " claims " + Shape(out.dims).str() + " (" + std::to_string(total) + " bytes) but holds only " +
           std::to_string(disk) + " bytes on disk: truncated or corrupt");
  out.data = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(total));
  got = f.read(out.data->data(), total);
  if (got < 0) c.fail("cannot read " + what + " (truncated or corrupt): " + f.error());
  if (got < total)
    c.fail(what + " is truncated: its header promises " + std::to_string(total) + " data bytes " +
           Shape(out.dims).str() + ", found " + std::to_string(got));
  uint8_t extra;
  got = f.read(&extra, 1);
  if (got < 0) c.fail("cannot read " + what + " (corrupt): " + f.error());
  if (got > 0) c.fail(what + " has bytes after the " + std::to_string(total) + " its header promises " + Shape(out.dims).str());
  return out;
}

}  // namespace

std::vector<std::string> idx_fields(const DataSourceSpec& spec) {
  std::vector<std::string> f;
  if (!spec.images.empty()) f.push_back("images");
  if (!spec.labels.empty()) f.push_back("labels");
  return f;
}

Loaded load_idx(const LoadContext& c) {
  const DataSourceSpec& spec = c.spec;
  Loaded out;
  out.readers.resize(c.inputs.size());
  std::optional<IdxFile> images, labels;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const DatasetInput& in = c.inputs[k];
    if (c.field_of[k] == "images") {
      images = read_idx(c, spec.images, "images");
      Shape per_sample(std::vector<int64_t>(images->dims.begin() + 1, images->dims.end()));
      if (!is_float(in.sample.dtype))
        c.fail("idx images from '" + spec.images + "' are floats in [0, 1], but input '" + in.name + "' is " +
               std::string(dtype_name(in.sample.dtype)));
      if (per_sample.numel() != in.sample.numel())
        c.fail("idx images in '" + spec.images + "' are " + per_sample.str() + " (" + std::to_string(per_sample.numel()) +
                   " values) per sample, but input '" + in.name + "' has shape " + in.sample.shape.str() + " (" +
                   std::to_string(in.sample.numel()) + " values)");
      const uint8_t* base = images->data->data();
      out.readers[k] = make_u8_reader(images->data, base, 0, per_sample.numel(), per_sample.numel(), in.sample.dtype, 255.0);
    } else {
      labels = read_idx(c, spec.labels, "labels");
      if (!is_int(in.sample.dtype) || in.sample.numel() != 1)
        c.fail("idx labels from '" + spec.labels + "' are one integer per sample, but input '" + in.name + "' is " +
               in.sample.str(), "declare the labels input as {shape: [], dtype: i64} (or i32)");
      int64_t n = c.rows_needed(labels->dims[0]);
      check_int_range(c, k, "idx labels file '" + spec.labels + "'", labels->data->data(), n, 1);
      out.readers[k] = make_u8_reader(labels->data, labels->data->data(), 0, 1, 1, in.sample.dtype);
    }
  }
  if (images && labels && images->dims[0] != labels->dims[0])
    c.fail("idx images '" + spec.images + "' hold " + std::to_string(images->dims[0]) + " samples but labels '" +
           spec.labels + "' hold " + std::to_string(labels->dims[0]));
  out.size = images ? images->dims[0] : labels ? labels->dims[0] : 0;
  out.from = images && labels ? spec.images + " and " + spec.labels : images ? spec.images : spec.labels;
  return out;
}

}  // namespace braid::io::data
