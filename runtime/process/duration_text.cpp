#include "runtime/process/duration_text.hpp"

#include <utility>

namespace astraeus {

std::string format_duration(int64_t seconds) {
  if (seconds < 0)
    seconds = 0;
  if (seconds < 60)
    return std::to_string(seconds) + "s";
  if (seconds < 3600)
    return std::to_string(seconds / 60) + "m";
  if (seconds < 86400) {
    auto m = (seconds % 3600) / 60;
    return std::to_string(seconds / 3600) + "h" + (m ? " " + std::to_string(m) + "m" : "");
  }
  auto h = (seconds % 86400) / 3600;
  return std::to_string(seconds / 86400) + "d" + (h ? " " + std::to_string(h) + "h" : "");
}

std::string format_duration_exact(int64_t seconds) {
  if (seconds <= 0)
    return "0s";
  std::string out;
  for (auto [unit, size] : {std::pair<char, int64_t>{'d', 86400}, {'h', 3600}, {'m', 60},
                            {'s', 1}}) {
    if (seconds >= size)
      out += std::to_string(seconds / size) + unit;
    seconds %= size;
  }
  return out;
}

} // namespace astraeus
