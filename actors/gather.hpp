#pragma once
/// @file
/// Asks many actors the same question and collects their answers: CAF 0.17
/// has no `fan_out_request`. Answers arrive in any order; an actor that
/// fails or times out is skipped (and `on_error` is told), so one slow
/// actor cannot block a listing forever.

#include <functional>
#include <memory>
#include <vector>

#include <caf/error.hpp>
#include <caf/timespan.hpp>

namespace astraeus {

/// Sends `xs...` to every handle in `targets` from `self`, waits up to
/// `timeout` for each, and calls `done` once with every answer of type T.
/// With no targets, `done` is called at once with an empty vector.
template <class T, class Self, class Targets, class Done, class... Ts>
void gather(Self* self, const Targets& targets, caf::timespan timeout,
            Done done, std::function<void(const caf::error&)> on_error,
            Ts... xs) {
  struct pending_t {
    std::vector<T> answers;
    size_t open = 0;
    std::function<void(std::vector<T>)> done;
  };
  auto pending = std::make_shared<pending_t>();
  pending->open = targets.size();
  pending->done = std::move(done);
  if (pending->open == 0) {
    pending->done(std::move(pending->answers));
    return;
  }
  auto settle = [pending] {
    if (--pending->open == 0)
      pending->done(std::move(pending->answers));
  };
  for (const auto& target : targets)
    self->request(target, timeout, xs...)
      .then(
        [pending, settle](T& answer) {
          pending->answers.push_back(std::move(answer));
          settle();
        },
        [settle, on_error](caf::error& err) {
          if (on_error)
            on_error(err);
          settle();
        });
}

} // namespace astraeus
