// The pair steps of a validation actor (validation_actor_internal.hpp,
// poll_pairs): both machines' slots, the server and client runs, the end.

#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/validation/pair_plan.hpp"
#include "actors/validation/validation_actor_internal.hpp"
#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"

namespace astraeus::validation_detail {

namespace val = astraeus::validation;

void mark_busy(validation_self self, int index, bool busy) {
  auto& st = self->state;
  for (const auto& m : val::step_machines(st.v.steps(index)))
    if (busy)
      st.busy.insert(m);
    else
      st.busy.erase(m);
}

void give_back_slot(validation_self self, const std::string& machine) {
  caf::anon_send(self->state.config.owner, atom::slot_v, machine, self->state.v.id(), false);
}

void remove_run(validation_self self, const std::string& name) {
  self->request(self->state.config.scheduler, std::chrono::seconds{10}, atom::remove_v, name)
    .then([](v1::Run&) {}, [](caf::error&) {});
}

void group_step_ended(validation_self self, int index, const std::string& label) {
  auto& st = self->state;
  if (st.cancelled)
    return;
  auto& step = *st.v.mutable_steps(index);
  spdlog::info("validation {}: {} {}: {}{}{}", st.v.id(), step.check(), label, step.state(),
               step.verdict().empty() ? "" : " " + step.verdict(),
               step.reason().empty() ? "" : ": " + step.reason());
  if (step.state() != val::yielded)
    self->send(st.config.owner, atom::validate_v, step);
  for (const auto& m : val::step_machines(step))
    give_back_slot(self, m);
  mark_busy(self, index, false);
  save(self);
}

void group_step_went_away(validation_self self, int index, const std::string& why) {
  run_gone(self, index, why);
  auto& step = *self->state.v.mutable_steps(index);
  for (const auto& run : val::step_runs(self->state.v, index))
    if (run != step.run())
      remove_run(self, run);
  step.set_state(val::queued);
  step.set_reason("its run " + step.run() + " went away (" + why + "); queued again");
  for (const auto& m : val::step_machines(step))
    give_back_slot(self, m);
  mark_busy(self, index, false);
  save(self);
}

void mark_submitted(validation_self self, int index, const v1::Run& run) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  step.set_state(val::running);
  step.set_run(run.spec().name());
  step.set_reason("");
  step.set_started_unix_ms(st.config.clock->now_unix_ms());
  mark_busy(self, index, false);
  save(self);
}

void get_step_run(validation_self self, int index, const std::string& name,
                  std::function<void(v1::Run&)> then) {
  self->request(self->state.config.scheduler, std::chrono::seconds{10}, atom::get_v, name)
    .then(
      [self, index, then](v1::Run& run) {
        if (self->state.v.steps(index).state() != val::running) {
          mark_busy(self, index, false);
          return;
        }
        // Deleted (issue 23 item 6: shown while its workers stop): gone.
        if (run.deleted()) {
          group_step_went_away(self, index, "deleted");
          return;
        }
        run_seen(self, index);
        then(run);
      },
      [self, index](caf::error& err) { group_step_went_away(self, index, render_error(err)); });
}

/// What a first run that ended early had said as its result ("; it said:
/// ib_write_bw is not installed (fix: apt install perftest)"), "" when it
/// printed none: a seventh new-user trial found the reason only in the
/// logs of a check run it did not know of.
static std::string said_before_ending(const v1::Run& run, const std::string& check) {
  if (run.workers_size() == 0)
    return {};
  auto line = run.workers(0).outputs().find("astraeus.result");
  if (line == run.workers(0).outputs().end())
    return {};
  auto result = val::parse_result(line->second, check);
  if (!result || result->summary().empty())
    return {};
  std::string fix;
  for (const auto& f : result->findings())
    if (!f.fix().empty()) {
      fix = f.fix();
      break;
    }
  return "; it said: " + result->summary() + (fix.empty() ? "" : " (fix: " + fix + ")");
}

/// Whether the first run ended by itself with a "skipped" result (the pair
/// check without ib_write_bw, the all-reduce without NCCL): the step is
/// that result, not a failure of the run.
static bool skipped_before_starting(const v1::Run& run, const std::string& check) {
  if (run.state() != "Stopped" || run.workers_size() == 0)
    return false;
  auto line = run.workers(0).outputs().find("astraeus.result");
  if (line == run.workers(0).outputs().end())
    return false;
  auto result = val::parse_result(line->second, check);
  return result && result->verdict() == "skipped";
}

void watch_first_run(validation_self self, int index, const std::string& name,
                     const std::string& what, const std::string& before,
                     std::function<void(const v1::Run&)> placed,
                     std::function<void(const std::string&)> ended_early,
                     std::function<void()> gave_way) {
  get_step_run(self, index, name, [=](v1::Run& run) {
    auto& step = *self->state.v.mutable_steps(index);
    bool ended = run.state() == "Stopped" || run.state() == "Failed";
    if (!ended && !run.master_addr().empty())
      placed(run);
    else if (ended && run.preempted()
             && val::apply_run(step, run, self->state.config.clock->now_unix_ms()))
      gave_way();  // gave way to real work: queued again
    else if (ended && skipped_before_starting(run, step.check())
             && val::apply_run(step, run, self->state.config.clock->now_unix_ms()))
      gave_way();  // it could not run here (no perftest, no NCCL): skipped, saying why
    else if (ended)
      ended_early(what + " ended (" + run.state() + ") before " + before
                  + (run.waiting_reason().empty() ? std::string{} : ": " + run.waiting_reason())
                  + said_before_ending(run, step.check()));
    else
      mark_busy(self, index, false);
  });
}

void with_slots(validation_self self, int index, std::vector<std::string> machines,
                std::function<void()> then, size_t next) {
  // Cancelled: no slot is asked for, nothing more starts.
  if (self->state.cancelled)
    return;
  if (next == machines.size()) {
    then();
    return;
  }
  auto& st = self->state;
  auto machine = machines[next];
  // Gives back the slots granted so far (a refusal or a lost answer).
  auto release = [self, index, machines, next] {
    for (size_t i = 0; i < next; ++i)
      give_back_slot(self, machines[i]);
    mark_busy(self, index, false);
  };
  self->request(st.config.owner, std::chrono::seconds{10}, atom::slot_v, machine, st.v.id(), true)
    .then(
      [self, index, machines, then, next, release](std::string& why) {
        if (why.empty()) {
          with_slots(self, index, machines, then, next + 1);
          return;
        }
        release();
        auto& step = *self->state.v.mutable_steps(index);
        if (step.reason() != why) {
          step.set_reason(why);
          save(self);
        }
      },
      [release](caf::error&) { release(); });
}

namespace {

const std::string& machine_a(validation_self self, int index) {
  return self->state.v.steps(index).machine();
}

const std::string& machine_b(validation_self self, int index) {
  return self->state.v.steps(index).peer();
}

/// The pair step ended (Done, Failed or Yielded): its findings name the
/// pair, the owner hears of it, both slots are given back.
void pair_ended(validation_self self, int index) {
  auto& step = *self->state.v.mutable_steps(index);
  auto label = val::pair_label(step);
  for (auto& f : *step.mutable_result()->mutable_findings())
    if (f.what().rfind(label, 0) != 0)
      f.set_what(label + " " + f.what());
  group_step_ended(self, index, label);
}

void fail_pair(validation_self self, int index, const std::string& why) {
  val::end_failed(*self->state.v.mutable_steps(index), why,
                  self->state.config.clock->now_unix_ms());
  pair_ended(self, index);
}

/// Submits the client's run once the server's is placed: it names the
/// server's address (MASTER_ADDR of the server's run, the address its
/// machine reports), and tries again until the server listens
/// (runtime/validation/pair_check.hpp).
void submit_client(validation_self self, int index, const v1::Run& server) {
  auto& st = self->state;
  auto rails = val::parse_pair_rails(server.spec().command(6));
  auto client = val::pair_spec(st.v, index, false, rails ? *rails : std::vector<val::pair_rail>{},
                               server.master_addr(), st.config.check_program);
  submit_run(
    self, std::move(client),
      [self, index](v1::Run& run) {
        auto& step = *self->state.v.mutable_steps(index);
        step.set_run(run.spec().name());
        mark_busy(self, index, false);
        save(self);
      },
      [self, index, name = server.spec().name()](caf::error& err) {
        remove_run(self, name);
        fail_pair(self, index, "the pair's client could not be submitted: " + render_error(err));
      });
}

/// Looks at a Running pair step: while only its server's run is submitted,
/// whether that is placed (then the client's is submitted); then the
/// client's run, which carries the result.
void look_at_pair(validation_self self, int index) {
  auto& st = self->state;
  mark_busy(self, index, true);
  auto server_name = val::pair_run_name(st.v, index, st.v.steps(index).attempts(), true);
  if (st.v.steps(index).run() == server_name) {
    watch_first_run(
      self, index, server_name, "the pair's server", "its client started",
      [self, index](const v1::Run& run) { submit_client(self, index, run); },
      [self, index](const std::string& why) { fail_pair(self, index, why); },
      [self, index] { pair_ended(self, index); });
    return;
  }
  get_step_run(self, index, st.v.steps(index).run(), [self, index, server_name](v1::Run& run) {
    auto& step = *self->state.v.mutable_steps(index);
    if (!val::apply_run(step, run, self->state.config.clock->now_unix_ms())) {
      mark_busy(self, index, false);
      return;
    }
    remove_run(self, server_name);
    pair_ended(self, index);
  });
}

/// Submits the server's run; the client's follows once it is placed
/// (look_at_pair).
void submit_pair(validation_self self, int index, std::vector<val::pair_rail> rails) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  step.set_attempts(step.attempts() + 1);
  auto server = val::pair_spec(st.v, index, true, rails, "", st.config.check_program);
  submit_run(self, std::move(server),
      [self, index](v1::Run& run) { mark_submitted(self, index, run); },
      [self, index](caf::error& err) {
        fail_pair(self, index, "the pair's server could not be submitted: " + render_error(err));
      });
}

/// With both slots held: the rails the two machines share, then the runs.
void prepare_pair(validation_self self, int index) {
  auto ask = [self](const std::string& name) {
    auto req = validation_cluster_request();
    req.mutable_get_machine()->set_name(name);
    return self->request(self->state.config.cluster, std::chrono::seconds{10}, std::move(req));
  };
  ask(machine_a(self, index))
    .then(
      [self, index, ask](v1::Response& a) {
        if (a.has_error()) {
          fail_pair(self, index, a.error().message());
          return;
        }
        ask(machine_b(self, index))
          .then(
            [self, index, a](v1::Response& b) {
              if (b.has_error()) {
                fail_pair(self, index, b.error().message());
                return;
              }
              auto rails = val::shared_rails(a.machine(), b.machine());
              if (!rails.empty()) {
                submit_pair(self, index, std::move(rails));
                return;
              }
              auto& st = self->state;
              auto& step = *st.v.mutable_steps(index);
              val::end_skipped(step,
                               "no RDMA port is Active on the same rail (device and port) of "
                                 + step.machine() + " and " + step.peer(),
                               st.config.clock->now_unix_ms());
              pair_ended(self, index);
            },
            [self, index](caf::error& err) { fail_pair(self, index, render_error(err)); });
      },
      [self, index](caf::error& err) { fail_pair(self, index, render_error(err)); });
}

/// Starts pair step `index` once both machines' slots are granted.
void start_pair(validation_self self, int index) {
  mark_busy(self, index, true);
  with_slots(self, index, {machine_a(self, index), machine_b(self, index)},
             [self, index] { prepare_pair(self, index); });
}

} // namespace

void poll_pairs(validation_self self) {
  auto& st = self->state;
  auto free = [&](int i) {
    return !st.busy.count(st.v.steps(i).machine()) && !st.busy.count(st.v.steps(i).peer());
  };
  for (int i = 0; i < st.v.steps_size(); ++i)
    if (val::is_pair(st.v.steps(i)) && st.v.steps(i).state() == val::running && free(i))
      look_at_pair(self, i);
  for (int i : val::startable_pairs(st.v))
    if (free(i))
      start_pair(self, i);
  if (!st.busy.empty())
    return;
  auto changed = val::judge_pairs(st.v, val::check_policy{}.values());
  for (int i : changed)
    self->send(st.config.owner, atom::validate_v, st.v.steps(i));
  if (!changed.empty())
    save(self);
}

} // namespace astraeus::validation_detail
