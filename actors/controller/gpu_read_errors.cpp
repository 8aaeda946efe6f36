// A field nvidia-smi keeps reading as [Unknown Error] (issue 18, rule 6).

#include "actors/controller/gpu_read_errors.hpp"

namespace astraeus {

std::vector<std::string> gpu_read_errors::take(const v1::Gpu& gpu) {
  static const std::string tail = ": Unknown Error";
  std::map<std::string, unsigned> next;
  for (const auto& u : gpu.unknown_fields()) {
    if (u.size() <= tail.size() || u.compare(u.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    auto field = u.substr(0, u.size() - tail.size());
    auto it = streak_.find(field);
    next[field] = (it == streak_.end() ? 0 : it->second) + 1;
  }
  streak_ = std::move(next);
  std::vector<std::string> out;
  for (const auto& [field, n] : streak_)
    if (n >= unknown_error_reports)
      out.push_back("nvidia-smi cannot read " + field);
  return out;
}

} // namespace astraeus
