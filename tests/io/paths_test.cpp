// read_file refuses what is not a regular file before reading a byte (issue 24): a directory, a FIFO with no
// writer (which must not block), a character device; a file over the size limit is refused from its size.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "io/paths.h"
#include "io/run_config.h"
#include "io/yaml_source.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

std::string read_error(const std::string& path, size_t max_bytes = 16u << 20) {
  try {
    read_file(path, max_bytes);
  } catch (const UserError& e) {
    return e.diagnostics().at(0).loc.str() + ": " + e.diagnostics().at(0).message;
  }
  return "";
}

TEST(ReadFile, RefusesDirectoriesAndDevices) {
  iotest::TempDir dir;
  EXPECT_EQ(read_error(dir.path()), dir.path() + ": is a directory, not a regular file");
  EXPECT_EQ(read_error("/dev/urandom"), "/dev/urandom: is a character device, not a regular file");
  EXPECT_EQ(read_error("/dev/null"), "/dev/null: is a character device, not a regular file");
  EXPECT_EQ(read_error(dir.path() + "/missing.yaml"), dir.path() + "/missing.yaml: no such file");
}

TEST(ReadFile, FifoWithoutWriterIsRefusedWithoutBlocking) {
  iotest::TempDir dir;
  std::string fifo = dir.path() + "/run.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] { return read_error(fifo); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // unblock the reader so that the test can end
    if (w >= 0) close(w);
    FAIL() << "read_file blocked on a FIFO";
  }
  EXPECT_EQ(result.get(), fifo + ": is a FIFO (named pipe), not a regular file");
  // Plan files (load_yaml_file) and the run-file loader say the same, naming the path.
  Diagnostics plan;
  load_yaml_file(fifo, plan);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan.all()[0].loc.str() + ": " + plan.all()[0].message, fifo + ": is a FIFO (named pipe), not a regular file");
  try {
    load_run_or_model(fifo, {});
    FAIL() << "a FIFO was loaded";
  } catch (const UserError& e) {
    EXPECT_EQ(e.diagnostics().at(0).loc.str() + ": " + e.diagnostics().at(0).message,
              fifo + ": is a FIFO (named pipe), not a regular file");
  }
}

TEST(ReadFile, SizeLimitFromTheFileSize) {
  iotest::TempDir dir;
  std::string big = dir.write("big.yaml", std::string(4097, 'a'));
  EXPECT_EQ(read_error(big, 4096), big + ": file is too large: 4097 bytes (the limit is 4096)");
  EXPECT_EQ(read_file(big, 4097).size(), 4097u);
  EXPECT_EQ(read_file(dir.write("empty.yaml", "")), "");
}

// A run file's model that is a device is refused at the `model:` key, naming the path.
TEST(ReadFile, ModelFileThatIsADevice) {
  iotest::TempDir dir;
  std::string run = dir.write("run.yaml", "model: /dev/urandom\ndata: {train: {format: synthetic, samples: 8}}\n");
  try {
    load_run_or_model(run, {});
    FAIL() << "/dev/urandom was loaded as a model";
  } catch (const UserError& e) {
    const auto& d = e.diagnostics().at(0);
    EXPECT_EQ(d.loc.str(), run + ":1:8");
    EXPECT_NE(d.message.find("'/dev/urandom': is a character device, not a regular file"), std::string::npos)
        << d.message;
  }
}

}  // namespace
