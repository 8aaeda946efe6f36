// The machines a CPU-only run's waiting reason names (README, "Why a run
// waits"): those that carry its labels but take no new user work, with why
// (cordoned, Down, Accepting, …), as the GPU engine names them for GPU runs
// (placement_reasons.cpp).

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <vector>

#include "actors/scheduler/scheduler_internal.hpp"

namespace astraeus::scheduler_detail {

namespace {

/// How many machines one reason names.
constexpr size_t name_at_most = 3;

} // namespace

std::string cpu_blockers(const scheduler_state& st, const label_map& labels) {
  std::vector<std::string> named;
  for (const auto& [name, f] : st.machine_facts_by_name) {
    auto accepting = f.label(accepting_label);
    bool takes_work = f.schedulable && !f.down && (!accepting || *accepting != "true");
    if (takes_work)
      continue;
    if (!f.has_labels(labels, accepting_label))
      continue;
    named.push_back(name + " "
                    + (!f.why_not.empty() ? f.why_not
                       : f.down           ? std::string{"is Down"}
                                          : std::string{"takes no new work"}));
  }
  if (named.empty())
    return {};
  std::sort(named.begin(), named.end());
  std::string out;
  for (size_t i = 0; i < named.size() && i < name_at_most; ++i)
    out += (i == 0 ? "; " : ", ") + named[i];
  if (named.size() > name_at_most)
    out += " and " + std::to_string(named.size() - name_at_most) + " more";
  return out;
}

} // namespace astraeus::scheduler_detail
