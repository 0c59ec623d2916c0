// Device strings and the single-device plan.
#include "planner/plan.h"

#include <cstdlib>

namespace braid::planner {

static bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::atoi(s.c_str());
  return true;
}

bool parse_devices(const std::string& text, DeviceSpec* out, std::string* err) {
  DeviceSpec d;
  auto colon = text.find(':');
  d.kind = text.substr(0, colon);
  if (d.kind != "cpu" && d.kind != "cuda") {
    *err = "unknown device kind '" + d.kind + "'; expected cpu or cuda";
    return false;
  }
  if (colon == std::string::npos) {
    d.count = 1;
    d.ids = {0};
  } else {
    std::string rest = text.substr(colon + 1);
    int n = 0;
    if (d.kind == "cpu") {
      if (!parse_int(rest, &n) || n < 1 || n > 1024) {
        *err = "cpu:N needs a device count from 1 to 1024, got '" + rest + "'";
        return false;
      }
      d.count = n;
      for (int i = 0; i < n; ++i) d.ids.push_back(i);
    } else {
      size_t start = 0;
      while (start <= rest.size()) {
        size_t comma = rest.find(',', start);
        std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        auto dash = item.find('-');
        int a = 0, b = 0;
        if (dash == std::string::npos ? !parse_int(item, &a) : !(parse_int(item.substr(0, dash), &a) && parse_int(item.substr(dash + 1), &b))) {
          *err = "bad device list '" + rest + "'; expected e.g. cuda:0-7 or cuda:0,2";
          return false;
        }
        if (dash == std::string::npos) b = a;
        if (b < a) {
          *err = "device range " + item + " runs backwards";
          return false;
        }
        for (int i = a; i <= b; ++i) d.ids.push_back(i);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      d.count = static_cast<int>(d.ids.size());
    }
  }
  *out = d;
  return true;
}

Plan single_device_plan(int64_t batch, int64_t micro_batch) {
  Plan p;
  p.micro_batch = micro_batch > 0 ? micro_batch : batch;
  p.micro_batches = batch / p.micro_batch;
  return p;
}

}  // namespace braid::planner
