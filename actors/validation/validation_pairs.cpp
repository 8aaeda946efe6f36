// The pair steps of a validation actor (validation_actor_internal.hpp,
// poll_pairs): both machines' slots, the server and client runs, the end.

#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/validation/pair_plan.hpp"
#include "actors/validation/validation_actor_internal.hpp"
#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"

namespace astraeus::validation_detail {

namespace {

namespace val = astraeus::validation;

const std::string& machine_a(validation_self self, int index) {
  return self->state.v.steps(index).machine();
}

const std::string& machine_b(validation_self self, int index) {
  return self->state.v.steps(index).peer();
}

void mark_busy(validation_self self, int index, bool busy) {
  auto& st = self->state;
  for (const auto& m : {machine_a(self, index), machine_b(self, index)})
    if (busy)
      st.busy.insert(m);
    else
      st.busy.erase(m);
}

void give_back_slot(validation_self self, const std::string& machine) {
  caf::anon_send(self->state.config.owner, atom::slot_v, machine, self->state.v.id(), false);
}

/// Removes the run named `name` (the other end of a pair that ended).
void remove_run(validation_self self, const std::string& name) {
  self->request(self->state.config.scheduler, std::chrono::seconds{10}, atom::remove_v, name)
    .then([](v1::Run&) {}, [](caf::error&) {});
}

/// The pair step ended (Done, Failed or Yielded): its findings name the
/// pair, the owner hears of it, both slots are given back.
void pair_ended(validation_self self, int index) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  auto label = val::pair_label(step);
  for (auto& f : *step.mutable_result()->mutable_findings())
    if (f.what().rfind(label, 0) != 0)
      f.set_what(label + " " + f.what());
  spdlog::info("validation {}: pair {}: {}{}{}", st.v.id(), label, step.state(),
               step.verdict().empty() ? "" : " " + step.verdict(),
               step.reason().empty() ? "" : ": " + step.reason());
  if (step.state() != val::yielded)
    self->send(st.config.owner, atom::validate_v, step);
  give_back_slot(self, step.machine());
  give_back_slot(self, step.peer());
  mark_busy(self, index, false);
  save(self);
}

void fail_pair(validation_self self, int index, const std::string& why) {
  auto& step = *self->state.v.mutable_steps(index);
  step.set_state(val::failed);
  step.set_verdict("fail");
  step.set_reason(why);
  step.set_finished_unix_ms(self->state.config.clock->now_unix_ms());
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
  self->request(st.config.scheduler, std::chrono::seconds{10}, atom::submit_v, client)
    .then(
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

/// The run of pair step `index` is gone (deleted by hand, `why`): the
/// step is queued again, its server's run removed, both slots given back.
void pair_run_went_away(validation_self self, int index, const std::string& server_name,
                        const std::string& why) {
  auto& step = *self->state.v.mutable_steps(index);
  remove_run(self, server_name);
  step.set_state(val::queued);
  step.set_reason("its run " + step.run() + " went away (" + why + "); queued again");
  give_back_slot(self, step.machine());
  give_back_slot(self, step.peer());
  mark_busy(self, index, false);
  save(self);
}

/// Looks at a Running pair step: while only its server's run is submitted,
/// whether that is placed (then the client's is submitted); then the
/// client's run, which carries the result.
void look_at_pair(validation_self self, int index) {
  auto& st = self->state;
  mark_busy(self, index, true);
  auto server_name = val::pair_run_name(st.v, index, st.v.steps(index).attempts(), true);
  bool waiting_for_server = st.v.steps(index).run() == server_name;
  self->request(st.config.scheduler, std::chrono::seconds{10}, atom::get_v,
                st.v.steps(index).run())
    .then(
      [self, index, server_name, waiting_for_server](v1::Run& run) {
        auto& st = self->state;
        auto& step = *st.v.mutable_steps(index);
        if (step.state() != val::running) {
          mark_busy(self, index, false);
          return;
        }
        // Deleted (issue 23 item 6: shown while its workers stop): gone.
        if (run.deleted()) {
          pair_run_went_away(self, index, server_name, "deleted");
          return;
        }
        if (waiting_for_server) {
          bool ended = run.state() == "Stopped" || run.state() == "Failed";
          if (!run.master_addr().empty() && !ended)
            submit_client(self, index, run);
          else if (ended && run.preempted()
                   && val::apply_run(step, run, st.config.clock->now_unix_ms()))
            pair_ended(self, index);  // gave way to real work: queued again
          else if (ended)
            fail_pair(self, index, "the pair's server ended (" + run.state()
                                     + ") before its client started"
                                     + (run.waiting_reason().empty()
                                          ? std::string{}
                                          : ": " + run.waiting_reason()));
          else
            mark_busy(self, index, false);
          return;
        }
        if (!val::apply_run(step, run, st.config.clock->now_unix_ms())) {
          mark_busy(self, index, false);
          return;
        }
        remove_run(self, server_name);
        pair_ended(self, index);
      },
      [self, index, server_name](caf::error& err) {
        pair_run_went_away(self, index, server_name, render_error(err));
      });
}

/// Submits the server's run; the client's follows once it is placed
/// (look_at_pair).
void submit_pair(validation_self self, int index, std::vector<val::pair_rail> rails) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  step.set_attempts(step.attempts() + 1);
  auto server = val::pair_spec(st.v, index, true, rails, "", st.config.check_program);
  self->request(st.config.scheduler, std::chrono::seconds{10}, atom::submit_v, server)
    .then(
      [self, index](v1::Run& run) {
        auto& st = self->state;
        auto& step = *st.v.mutable_steps(index);
        step.set_state(val::running);
        step.set_run(run.spec().name());
        step.set_reason("");
        step.set_started_unix_ms(st.config.clock->now_unix_ms());
        mark_busy(self, index, false);
        save(self);
      },
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
              std::string why = "no RDMA port is Active on the same rail (device and port) of "
                                + step.machine() + " and " + step.peer();
              step.set_state(val::done);
              step.set_verdict("skipped");
              step.set_reason(why);
              step.mutable_result()->set_check(val::pair_check);
              step.mutable_result()->set_verdict("skipped");
              step.mutable_result()->set_summary(why);
              step.set_finished_unix_ms(st.config.clock->now_unix_ms());
              pair_ended(self, index);
            },
            [self, index](caf::error& err) { fail_pair(self, index, render_error(err)); });
      },
      [self, index](caf::error& err) { fail_pair(self, index, render_error(err)); });
}

/// Asks for the slot of `machine` for pair step `index`; `then` runs once it
/// is granted; a refusal becomes the step's reason (it waits).
template <class F>
void with_slot(validation_self self, int index, const std::string& machine, F then,
               std::vector<std::string> held) {
  auto& st = self->state;
  self->request(st.config.owner, std::chrono::seconds{10}, atom::slot_v, machine, st.v.id(), true)
    .then(
      [self, index, then, held](std::string& why) mutable {
        if (why.empty()) {
          then();
          return;
        }
        for (const auto& m : held)
          give_back_slot(self, m);
        mark_busy(self, index, false);
        auto& step = *self->state.v.mutable_steps(index);
        if (step.reason() != why) {
          step.set_reason(why);
          save(self);
        }
      },
      [self, index, held](caf::error&) {
        for (const auto& m : held)
          give_back_slot(self, m);
        mark_busy(self, index, false);
      });
}

/// Starts pair step `index` once both machines' slots are granted.
void start_pair(validation_self self, int index) {
  mark_busy(self, index, true);
  auto a = machine_a(self, index);
  auto b = machine_b(self, index);
  with_slot(
    self, index, a,
    [self, index, a, b] {
      with_slot(self, index, b, [self, index] { prepare_pair(self, index); },
                std::vector<std::string>{a});
    },
    {});
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
