// Temporary folders for the tests, each of its own. CTest runs the discovered tests side by side, each in its own
// process, so a fixed name under the system temp dir is shared by every test that uses it: in CI one test read
// run.yaml while another test of its file rewrote it (RunPlan, 2026-12-07). Tests take a TempDir, or the folder
// process_temp_dir() makes once for the test process; both are removed when they go away.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace braid::testing {

// A fresh folder under the system temp dir (mkdtemp), removed with all it holds when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "braid_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);  // a test may have made it read-only
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `text` to `name` (folders created as needed) and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  std::string path_;
};

// This test process's own folder, made on first use and removed at exit.
inline std::filesystem::path process_temp_dir() {
  static const TempDir dir("braid_test");
  return dir.path();
}

}  // namespace braid::testing
