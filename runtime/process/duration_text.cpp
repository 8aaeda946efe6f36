#include "runtime/process/duration_text.hpp"

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

} // namespace astraeus
