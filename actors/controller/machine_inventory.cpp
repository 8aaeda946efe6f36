// A GPU listed twice by one agent is shown once, with a warning.

#include "actors/controller/machine_inventory.hpp"

#include <map>

namespace astraeus {

std::vector<std::string> fold_repeated_gpus(v1::GpuSection& section) {
  // Every report passes here: a repeat is looked for without allocating
  // first (a machine has a handful of GPUs), the map only when there is one.
  const auto& gpus_in = section.gpus();
  bool repeated = false;
  for (int i = 0; i < gpus_in.size() && !repeated; ++i)
    for (int j = i + 1; j < gpus_in.size() && !repeated; ++j)
      repeated = !gpus_in[i].id().empty() && gpus_in[i].id() == gpus_in[j].id();
  if (!repeated)
    return {};
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
