#include "actors/agent/gate_targets.hpp"

#include <algorithm>

namespace astraeus {

gate_targets::gate_targets(std::vector<gate_target> given) : given_(std::move(given)) {
  if (given_.empty())
    given_.push_back(gate_target{"127.0.0.1", 7450});
}

const gate_target& gate_targets::target() const {
  return following_ ? *following_ : given_[index_];
}

void gate_targets::new_round() {
  failed_in_round_ = 0;
  standby_answered_ = false;
  failed_.clear();
  hops_ = 0;
}

size_t gate_targets::advance() {
  index_ = (index_ + 1) % given_.size();
  if (given_.size() > 1 && avoided(given_[index_])) {
    index_ = (index_ + 1) % given_.size();
    return 2;
  }
  return 1;
}

retry_when gate_targets::pause() {
  advance();
  following_.reset();
  new_round();
  ++soons_;
  return retry_when::soon;
}

retry_when gate_targets::next_given() {
  auto before = index_;
  // A skipped (avoided) gate counts as tried in this round.
  failed_in_round_ += advance();
  if (failed_in_round_ < given_.size())
    return retry_when::at_once;
  if (standby_answered_) {
    // An HA group between leaders: the standbys will know one shortly.
    // `pause` moves on to the next given gate; undo that so the round
    // starts where it started before.
    index_ = before;
    return pause();
  }
  new_round();
  return retry_when::back_off;
}

retry_when gate_targets::failed() {
  failed_.push_back(target());
  if (following_) {
    // The leader a standby named does not answer (yet, or any more): back
    // to the given gate that named it, which may know better by now.
    following_.reset();
    return retry_when::at_once;
  }
  return next_given();
}

void gate_targets::welcomed() {
  new_round();
  soons_ = 0;
  silent_.reset();
}

retry_when gate_targets::lost() {
  new_round();
  return retry_when::at_once;
}

retry_when gate_targets::silent() {
  silent_ = target();
  silent_named_ = 0;
  failed_.push_back(target());
  if (following_) {
    following_.reset();
    if (!avoided(given_[index_]))
      return retry_when::at_once;  // back to the given gate that named it
  }
  return next_given();
}

retry_when gate_targets::not_leader(const gate_target& leader) {
  standby_answered_ = true;
  if (silent_ && *silent_ != leader)
    silent_.reset();  // another leader: the silent one was deposed
  else if (silent_ && ++silent_named_ > silent_answers)
    silent_.reset();  // still named: it leads again (a short freeze)
  auto failed_before = std::find(failed_.begin(), failed_.end(), leader) != failed_.end();
  if (avoided(leader) || failed_before || hops_ >= max_hops)
    return pause();
  ++hops_;
  following_ = leader;
  return retry_when::at_once;
}

retry_when gate_targets::no_leader() {
  standby_answered_ = true;
  if (following_) {
    // The named leader has not taken over yet (or lost the lease since).
    return pause();
  }
  return next_given();
}

std::chrono::milliseconds gate_targets::soon_delay(std::chrono::milliseconds cap) const {
  auto delay = soon_base;
  for (uint32_t i = soon_flat; i < soons_ && delay < cap; ++i)
    delay *= 2;
  return std::max(soon_base, std::min(delay, cap));
}

} // namespace astraeus
