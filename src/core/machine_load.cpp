#include "core/machine_load.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace braid {

CpuSample CpuSample::now() {
  CpuSample s;
  s.when = std::chrono::steady_clock::now();
  std::ifstream st("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (st >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu")
    s.busy_ticks = user + nice + system + irq + softirq + steal;
  std::ifstream self("/proc/self/stat");
  std::string line;
  if (!std::getline(self, line)) return s;
  // Fields after the command name (which may hold spaces, so start after its closing parenthesis): state is
  // field 3, utime 14, stime 15.
  auto close = line.rfind(')');
  if (close == std::string::npos) return s;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  s.self_ticks = utime + stime;
  return s;
}

double other_cores(const CpuSample& from, const CpuSample& to) {
  if (from.busy_ticks < 0 || to.busy_ticks < 0) return 0;
  const double wall = std::chrono::duration<double>(to.when - from.when).count();
  if (wall <= 0) return 0;
  static const double hz = static_cast<double>(sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100);
  const long long other = (to.busy_ticks - from.busy_ticks) - (to.self_ticks - from.self_ticks);
  return other > 0 ? static_cast<double>(other) / hz / wall : 0.0;
}

int other_runnable(int samples, int gap_us) {
  int least = -1;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    std::ifstream st("/proc/stat");
    std::string key;
    long long v = -1;
    while (st >> key) {
      if (key == "procs_running") {
        st >> v;
        break;
      }
      st.ignore(1 << 20, '\n');
    }
    if (v < 1) return -1;
    const int others = static_cast<int>(v - 1);
    least = least < 0 ? others : std::min(least, others);
  }
  return least;
}

const char* openmp_wait_choice(int others, int cores) {
  return others >= 0 && 4 * others < cores ? "spin" : "passive";
}

}  // namespace braid
