// Checkpoint save/load speed next to dd: a checkpoint of N parameters (default 100M: 96 f32 matrices of
// 1024x1024 and their biases) with AdamW state (exp_avg, exp_avg_sq), written with io::write_checkpoint
// (atomic, fsynced) and read with io::read_checkpoint (header and every checksum verified) after its pages are
// dropped from the page cache (posix_fadvise DONTNEED). Each run interleaves braid and dd on the same bytes in
// the same folder (dd writes the checkpoint file's bytes from a copy in /dev/shm with conv=fsync into a new
// file renamed over the previous one, as braid does; it reads after dropping the file's cache, and with
// iflag=direct), so both see the same disk weather. Medians of R runs, then a table with ratios.
// Build and run: scripts/bench/ckpt_speed.sh [DIR]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "io/checkpoint.h"

using namespace braid;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor filled(Shape s, uint32_t seed) {
  Tensor t = Tensor::empty({std::move(s), DType::f32});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Seconds taken by a shell command; exits on failure.
double timed(const std::string& cmd) {
  double t0 = now();
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", cmd.c_str());
    std::exit(1);
  }
  return now() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [PARAMS_MILLIONS=100] [RUNS=3]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t millions = argc > 2 ? std::atoll(argv[2]) : 100;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t side = 1024, mats = (millions * 1000000 + side * side - 1) / (side * side);

  io::Checkpoint c;
  c.meta.step = 1000;
  c.meta.run_text = "benchmark";
  c.optimizer_type = "adamw";
  c.optimizer_steps = 1000;
  int64_t params = 0;
  for (int64_t k = 0; k < mats; ++k) {
    std::string name = "h." + std::to_string(k) + ".fc";
    c.params.emplace_back(name + ".weight", filled(Shape{side, side}, static_cast<uint32_t>(3 * k)));
    c.params.emplace_back(name + ".bias", filled(Shape{side}, static_cast<uint32_t>(3 * k + 1)));
  }
  for (const auto& [name, t] : c.params) {
    params += t.numel();
    c.optimizer.push_back({name, "exp_avg", filled(t.shape(), 7)});
    c.optimizer.push_back({name, "exp_avg_sq", filled(t.shape(), 8)});
  }
  c.rng = {{"init", 1, 0}, {"dropout", 2, 3}};
  const std::string path = dir + "/bench_ckpt.h5";
  std::printf("checkpoint: %lld parameters in %zu tensors, AdamW state: %zu tensors; file %s\n",
              static_cast<long long>(params), c.params.size(), c.optimizer.size(), path.c_str());

  const std::string dd_file = dir + "/dd.bin";
  const std::string dd_source = (::access("/dev/shm", W_OK) == 0 ? std::string("/dev/shm") : dir) + "/braid_ckpt_speed_src.bin";
  std::vector<double> save, load, dd_write, dd_read, dd_direct;
  double bytes = 0, dd_bytes = 0;
  for (int r = 0; r < runs; ++r) {
    double t0 = now();
    io::write_checkpoint(path, c);
    save.push_back(now() - t0);
    struct stat st {};
    ::stat(path.c_str(), &st);
    bytes = static_cast<double>(st.st_size);
    dd_bytes = bytes;
    // dd writes the checkpoint's own bytes (zeros can be skipped by thin-provisioned virtual disks) from a
    // copy in memory (/dev/shm), as braid writes from memory, the way braid does: into a new file beside
    // the previous one, then renamed over it. (Rewriting just-freed blocks can be several times faster on
    // a virtual disk, which would compare dd's best case with braid's usual one.)
    if (r == 0) timed("cp " + path + " " + dd_source);
    dd_write.push_back(timed("dd if=" + dd_source + " of=" + dd_file + ".tmp bs=4M conv=fsync status=none && mv -f " +
                             dd_file + ".tmp " + dd_file));
    drop_cache(path);
    t0 = now();
    io::Checkpoint back = io::read_checkpoint(path);
    load.push_back(now() - t0);
    if (back.params.size() != c.params.size() || back.optimizer.size() != c.optimizer.size()) {
      std::fprintf(stderr, "read back a different checkpoint\n");
      return 1;
    }
    back = io::Checkpoint{};
    drop_cache(dd_file);
    dd_read.push_back(timed("dd if=" + dd_file + " of=/dev/null bs=4M status=none"));
    dd_direct.push_back(timed("dd if=" + dd_file + " of=/dev/null bs=4M iflag=direct status=none"));
    auto mbs = [](double b, double s) { return b / 1e6 / s; };
    std::printf("run %d: save %.0f MB/s, dd write %.0f MB/s; load %.0f MB/s, dd read %.0f MB/s (direct %.0f MB/s)\n",
                r + 1, mbs(bytes, save.back()), mbs(dd_bytes, dd_write.back()), mbs(bytes, load.back()),
                mbs(dd_bytes, dd_read.back()), mbs(dd_bytes, dd_direct.back()));
    std::fflush(stdout);
  }
  ::unlink(dd_file.c_str());
  ::unlink(dd_source.c_str());
  const double s = median(save), l = median(load), w = median(dd_write), rd = median(dd_read), dr = median(dd_direct);
  std::printf("\ncheckpoint: %.0f MB (dd: %.0f MB); medians of %d runs; MB = 10^6 bytes\n", bytes / 1e6, dd_bytes / 1e6, runs);
  std::printf("%-36s %10s %10s %8s\n", "", "braid MB/s", "dd MB/s", "ratio");
  std::printf("%-36s %10.0f %10.0f %7.2fx\n", "save (fsync) vs dd conv=fsync", bytes / 1e6 / s, dd_bytes / 1e6 / w,
              (bytes / s) / (dd_bytes / w));
  std::printf("%-36s %10.0f %10.0f %7.2fx\n", "load (cold, verified) vs dd read", bytes / 1e6 / l, dd_bytes / 1e6 / rd,
              (bytes / l) / (dd_bytes / rd));
  std::printf("%-36s %10s %10.0f %7.2fx\n", "load vs dd iflag=direct", "", dd_bytes / 1e6 / dr, (bytes / l) / (dd_bytes / dr));
  ::unlink(path.c_str());
  return 0;
}
