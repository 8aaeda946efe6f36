// A GPU listed twice by one agent is shown once, with a warning.

#include "actors/controller/machine_inventory.hpp"

#include <map>

namespace astraeus {

std::vector<std::string> fold_repeated_gpus(v1::GpuSection& section) {
  std::map<std::string, int> times;
  auto* gpus = section.mutable_gpus();
  for (auto i = gpus->begin(); i != gpus->end();) {
    if (i->id().empty() || ++times[i->id()] == 1) {
      ++i;
      continue;
    }
    i = gpus->erase(i);
  }
  std::vector<std::string> out;
  for (const auto& [id, n] : times)
    if (n > 1)
      out.push_back("GPU " + id + " is listed " + std::to_string(n)
                    + " times by the agent; shown once");
  return out;
}

} // namespace astraeus
