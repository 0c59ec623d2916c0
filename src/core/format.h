// Human-readable numbers for reports: byte sizes (KiB, MiB, GiB) and counts (k, M, G, T).
#pragma once
#include <string>

namespace braid {

std::string human_bytes(double bytes);  // "1.50 MiB"
std::string human_count(double n);      // "57.53M"

}  // namespace braid
