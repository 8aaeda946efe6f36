#pragma once
/// @file
/// When the agent reports (issue 18, rule 10): by deadline, so reports do not
/// drift by the time each takes, and never less often than the controller
/// asks, so a lapse shorter than three intervals cannot make a machine flap.

#include <caf/actor_clock.hpp>
#include <caf/timespan.hpp>

namespace astraeus {

/// The deadline of the report after the one due at `due`, `interval` later;
/// when the agent fell behind (`now` already past it), `interval` after
/// `now`, so missed reports are not sent in a burst.
inline caf::actor_clock::time_point next_report_due(caf::actor_clock::time_point due,
                                                    caf::actor_clock::time_point now,
                                                    caf::timespan interval) {
  auto next = due + interval;
  return next > now ? next : now + interval;
}

/// The interval the agent reports at: its own `configured` one, or the
/// controller's `told` longest interval when that is shorter (zero: the
/// controller told none).
inline caf::timespan effective_report_interval(caf::timespan configured, caf::timespan told) {
  return told.count() > 0 && told < configured ? told : configured;
}

} // namespace astraeus
