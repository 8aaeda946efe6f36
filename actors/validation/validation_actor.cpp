// One validation as an actor (validation_actor.hpp): slots, runs, results.

#include "actors/validation/validation_actor.hpp"
#include "actors/validation/validation_actor_internal.hpp"

#include <string>
#include <vector>

#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/pair_plan.hpp"
#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"
#include "runtime/validation/fix_commands.hpp"
#include "store/store.hpp"

namespace astraeus::validation_detail {

void save(validation_self self) {
  auto& st = self->state;
  if (st.cancelled)
    return;
  if (auto err = st.config.store->put(family::validations, "val/" + st.v.id(), st.v, true))
    spdlog::error("validation {}: cannot store it: {}", st.v.id(), render_error(err));
  self->send(st.config.owner, atom::validate_v, st.v);
}

void submit_run(validation_self self, v1::RunSpec spec, std::function<void(v1::Run&)> ok,
                std::function<void(caf::error&)> failed) {
  if (self->state.cancelled)
    return;
  self->request(self->state.config.scheduler, std::chrono::seconds{10}, atom::submit_v,
                std::move(spec))
    .then(
      [self, ok = std::move(ok)](v1::Run& run) {
        if (self->state.cancelled) {
          remove_run(self, run.spec().name());
          return;
        }
        ok(run);
      },
      [self, failed = std::move(failed)](caf::error& err) {
        if (!self->state.cancelled)
          failed(err);
      });
}

v1::Request validation_cluster_request() {
  v1::Request req;
  *req.mutable_caller() = validation_principal();
  return req;
}

void run_seen(validation_self self, int index) {
  self->state.unconfirmed.erase(index);
}

void run_gone(validation_self self, int index, const std::string& why) {
  if (self->state.unconfirmed.erase(index) == 0)
    return;
  auto& step = *self->state.v.mutable_steps(index);
  step.set_restarted(validation::restarted_gone(step.run(), why));
}

} // namespace astraeus::validation_detail

namespace astraeus {

namespace {

using self_ptr = validation_actor::stateful_pointer<validation_state>;
using validation_detail::save;

v1::Request cluster_request() {
  return validation_detail::validation_cluster_request();
}

void try_start(self_ptr self, int index);

/// The step ended: kept, reported to the owner, the slot given back, and
/// the machine's next step tried at once (not at the next poll: the
/// controller's overhead per step stays below one poll interval).
void step_ended(self_ptr self, int index) {
  auto& st = self->state;
  if (st.cancelled)
    return;
  auto& step = *st.v.mutable_steps(index);
  spdlog::info("validation {}: {} on {}: {}{}{}", st.v.id(), step.check(), step.machine(),
               step.state(), step.verdict().empty() ? "" : " " + step.verdict(),
               step.reason().empty() ? "" : ": " + step.reason());
  if (step.state() != validation::yielded)
    self->send(st.config.owner, atom::validate_v, step);
  caf::anon_send(st.config.owner, atom::slot_v, step.machine(), st.v.id(), false);
  st.busy.erase(step.machine());
  save(self);
  if (st.removed.count(step.machine()))
    return;
  if (auto next = validation::next_step(st.v, step.machine()))
    try_start(self, *next);
}

/// A quick step also looks at the machine's GPUs as the controller knows them.
void finish_quick(self_ptr self, int index) {
  auto& st = self->state;
  auto req = cluster_request();
  req.mutable_list_gpus()->set_machine(st.v.steps(index).machine());
  self->request(st.config.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, index](v1::Response& resp) {
        auto& step = *self->state.v.mutable_steps(index);
        if (!resp.has_error() && step.state() == validation::done)
          combine_quick(step, resp.gpus());
        step_ended(self, index);
      },
      [self, index](caf::error&) { step_ended(self, index); });
}

/// The run of step `index` is gone (deleted by hand, `why`): the step is
/// queued again.
void run_went_away(self_ptr self, int index, const std::string& why) {
  validation_detail::run_gone(self, index, why);
  auto& step = *self->state.v.mutable_steps(index);
  step.set_state(validation::queued);
  step.set_reason("its run " + step.run() + " went away (" + why + "); queued again");
  caf::anon_send(self->state.config.owner, atom::slot_v, step.machine(), self->state.v.id(),
                 false);
  self->state.busy.erase(step.machine());
  save(self);
}

/// Looks at the run of a Running step.
void look_at_run(self_ptr self, int index) {
  auto& st = self->state;
  st.busy.insert(st.v.steps(index).machine());
  self->request(st.config.scheduler, std::chrono::seconds{10}, atom::get_v,
                st.v.steps(index).run())
    .then(
      [self, index](v1::Run& run) {
        // Deleted (issue 23 item 6: shown while its workers stop): gone.
        if (run.deleted()) {
          run_went_away(self, index, "deleted");
          return;
        }
        validation_detail::run_seen(self, index);
        auto& st = self->state;
        auto& step = *st.v.mutable_steps(index);
        if (step.state() != validation::running
            || !validation::apply_run(step, run, st.config.clock->now_unix_ms())) {
          // A check whose run waits says why (its machine drained, cordoned
          // or Down: a seventh trial saw "Running" with an empty WHY).
          if (step.state() == validation::running) {
            auto why = validation::waiting_words(run);
            if (why != step.reason() && (why.empty() ? validation::is_waiting_words(step.reason())
                                                      : step.reason().empty()
                                                          || validation::is_waiting_words(
                                                            step.reason()))) {
              step.set_reason(why);
              save(self);
            }
          }
          st.busy.erase(step.machine());
          return;
        }
        if (step.check() == "quick" && step.state() == validation::done)
          finish_quick(self, index);
        else
          step_ended(self, index);
      },
      [self, index](caf::error& err) { run_went_away(self, index, render_error(err)); });
}

/// Submits step `index` as a run on `gpus` GPUs (the slot is held); `note`
/// says which of the machine's GPUs it leaves out and why ("" = none); a
/// disk check tests `data_dir` (the machine's data location).
void submit(self_ptr self, int index, uint32_t gpus, std::string note,
            const std::string& data_dir = {}) {
  auto& st = self->state;
  auto& step = *st.v.mutable_steps(index);
  step.set_attempts(step.attempts() + 1);
  auto v = st.v;
  if (!data_dir.empty())
    v.set_data_dir(data_dir);
  auto spec = validation::run_spec(v, index, gpus, st.config.check_program);
  validation_detail::submit_run(
    self, std::move(spec),
      [self, index, note](v1::Run& run) {
        auto& st = self->state;
        auto& step = *st.v.mutable_steps(index);
        step.set_state(validation::running);
        step.set_run(run.spec().name());
        step.set_reason(note);
        step.set_started_unix_ms(st.config.clock->now_unix_ms());
        st.busy.erase(step.machine());
        save(self);
      },
      [self, index](caf::error& err) {
        auto& st = self->state;
        auto& step = *st.v.mutable_steps(index);
        step.set_state(validation::failed);
        step.set_verdict("fail");
        step.set_reason("the check could not be submitted: " + render_error(err));
        step_ended(self, index);
      });
}

/// Fails step `index` before it ran, with `why`.
void fail_unstarted(self_ptr self, int index, const std::string& why) {
  auto& step = *self->state.v.mutable_steps(index);
  step.set_state(validation::failed);
  step.set_verdict("fail");
  step.set_reason(why);
  step_ended(self, index);
}

/// Ends step `index` without running it: Done, verdict skipped, `why`.
void skip_step(self_ptr self, int index, const std::string& why) {
  validation::end_skipped(*self->state.v.mutable_steps(index), why,
                          self->state.config.clock->now_unix_ms());
  step_ended(self, index);
}

/// Sizes step `index` to the machine's GPUs it can have, then submits it. A
/// check takes all of a machine's GPUs but those no run can have (Foreign,
/// Faulty, set aside): it runs on the others and its reason names those left
/// out, rather than wait for GPUs that never come; with none left it fails
/// with that reason (validation_plan.hpp, "GPUs a check runs on").
void size_gpus(self_ptr self, int index) {
  auto& st = self->state;
  const auto machine = st.v.steps(index).machine();
  auto req = cluster_request();
  req.mutable_get_machine()->set_name(machine);
  self->request(st.config.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, index, machine](v1::Response& resp) {
        if (resp.has_error() && resp.error().code() == to_string(ec::no_such_machine)) {
          self->state.removed.insert(machine);
          fail_unstarted(self, index, validation::removed_reason(machine));
          return;
        }
        if (resp.has_error()) {
          submit(self, index, 0, "");
          return;
        }
        auto& st = self->state;
        std::string folder;
        if (st.v.steps(index).check() == "disk") {
          folder = validation::disk_folder(st.v, resp.machine());
          if (folder.empty()) {
            skip_step(self, index,
                      "no data location chosen: " + fix_command::data_location(machine));
            return;
          }
        }
        auto view = std::make_shared<v1::MachineView>(resp.machine());
        auto greq = cluster_request();
        greq.mutable_list_gpus()->set_machine(machine);
        self->request(self->state.config.cluster, std::chrono::seconds{10}, std::move(greq))
          .then(
            [self, index, view, folder](v1::Response& gresp) {
              auto usable = validation::usable_gpus(
                *view, gresp.has_error() ? v1::GpuList{} : gresp.gpus());
              if (usable.total > 0 && usable.count == 0)
                fail_unstarted(self, index, usable.note);
              else
                submit(self, index, usable.count, usable.note, folder);
            },
            [self, index, view, folder](caf::error&) {
              auto usable = validation::usable_gpus(*view, v1::GpuList{});
              submit(self, index, usable.count, usable.note, folder);
            });
      },
      [self, index](caf::error&) { submit(self, index, 0, ""); });
}

/// Starts step `index` once the owner grants the machine's slot.
void try_start(self_ptr self, int index) {
  auto& st = self->state;
  const auto machine = st.v.steps(index).machine();
  st.busy.insert(machine);
  self->request(st.config.owner, std::chrono::seconds{10}, atom::slot_v, machine, st.v.id(), true)
    .then(
      [self, index, machine](std::string& why) {
        auto& st = self->state;
        if (st.cancelled)
          return;
        auto& step = *st.v.mutable_steps(index);
        if (!why.empty()) {
          st.busy.erase(machine);
          if (step.reason() != why) {
            step.set_reason(why);
            save(self);
          }
          return;
        }
        size_gpus(self, index);
      },
      [self, machine](caf::error&) { self->state.busy.erase(machine); });
}

/// Ends the steps of `machine`, which the cluster no longer has: they fail
/// naming it, their runs are removed (pinned to a machine that is gone they
/// would wait forever), the slots they held are given back.
void end_removed_machine(self_ptr self, const std::string& machine) {
  auto& st = self->state;
  // A Running pair or all-reduce step holds its other machines' slots too.
  std::set<std::string> slots{machine};
  for (const auto& s : st.v.steps())
    if (s.state() == validation::running && validation::involves(s, machine))
      for (const auto& m : validation::step_machines(s))
        slots.insert(m);
  std::vector<std::string> runs;
  auto ended = validation::end_removed(st.v, machine, st.config.clock->now_unix_ms(), runs);
  if (ended.empty())
    return;
  spdlog::info("validation {}: machine {} was removed: {} step(s) end", st.v.id(), machine,
               ended.size());
  for (const auto& run : runs)
    self->request(st.config.scheduler, std::chrono::seconds{10}, atom::remove_v, run)
      .then([](v1::Run&) {}, [](caf::error&) {});
  for (int i : ended)
    self->send(st.config.owner, atom::validate_v, st.v.steps(i));
  for (const auto& m : slots)
    caf::anon_send(st.config.owner, atom::slot_v, m, st.v.id(), false);
  save(self);
}

void poll(self_ptr self) {
  auto& st = self->state;
  if (st.cancelled) {
    if (self->clock().now() >= st.linger_until)
      self->quit();
    return;
  }
  for (const auto& machine : st.removed)
    if (!st.busy.count(machine))
      end_removed_machine(self, machine);
  for (const auto& machine : st.v.machines()) {
    if (st.busy.count(machine))
      continue;
    for (int i = 0; i < st.v.steps_size(); ++i)
      if (st.v.steps(i).machine() == machine && st.v.steps(i).state() == validation::running
          && !validation::is_pair(st.v.steps(i)) && !validation::is_all_reduce(st.v.steps(i))) {
        look_at_run(self, i);
        break;
      }
    if (st.busy.count(machine))
      continue;
    if (auto next = validation::next_step(st.v, machine))
      try_start(self, *next);
  }
  validation_detail::poll_pairs(self);
  validation_detail::poll_all_reduce(self);
  if (st.busy.empty() && validation::conclude(st.v, st.config.clock->now_unix_ms())) {
    spdlog::info("validation {}: {}", st.v.id(), validation::outcome_line(st.v));
    save(self);
    self->quit();
    return;
  }
  self->delayed_send(self, st.config.poll_interval, atom::poll_v);
}

/// `astra astraeus cancel`: the steps not ended are Cancelled, the runs of
/// Running ones removed, every slot it holds given back (its owner frees
/// them on the Cancelled copy), stored and told; then it lingers for the
/// answers to what it asked before (late submits' runs are removed) and
/// quits.
v1::Validation cancel(self_ptr self, const std::string& by, const std::string& why) {
  auto& st = self->state;
  if (st.cancelled || st.v.state() != "Running")
    return st.v;
  auto runs = validation::cancel(st.v, by, why, st.config.clock->now_unix_ms());
  spdlog::info("validation {}: {}; {} check run(s) removed", st.v.id(),
               validation::cancelled_words(by, why), runs.size());
  for (const auto& run : runs)
    validation_detail::remove_run(self, run);
  save(self);
  st.cancelled = true;
  st.linger_until = self->clock().now() + std::chrono::seconds{12};
  self->delayed_send(self, std::chrono::seconds{12}, atom::poll_v);
  return st.v;
}

} // namespace

v1::Principal validation_principal() {
  v1::Principal p;
  p.set_name("validation");
  p.set_role("owner");
  return p;
}

void combine_quick(v1::ValidationStep& step, const v1::GpuList& gpus) {
  auto* result = step.mutable_result();
  const std::string check_said = result->summary();
  const bool check_ran = result->verdict() != "skipped";
  std::vector<std::string> faulted;
  for (const auto& g : gpus.gpus()) {
    if (g.health() != "Faulty")
      continue;
    auto* f = result->add_findings();
    f->set_severity("fail");
    f->set_gpu(g.gpu().id());
    std::string why;
    for (const auto& r : g.health_reasons())
      why += (why.empty() ? "" : "; ") + r;
    f->set_what(step.machine() + " GPU " + g.gpu().id() + " has a latched fault"
                + (why.empty() ? "" : ": " + why));
    f->set_fix("Find the cause in `" + fix_command::gpus(step.machine())
               + "`; once it is repaired, `"
               + fix_command::clear_fault(step.machine(), g.gpu().id()) + "`.");
    f->set_machine(step.machine());
    f->set_check(step.check());
    result->set_verdict("fail");
    step.set_verdict("fail");
    faulted.push_back(f->what());
  }
  if (faulted.empty())
    return;
  // The reason shown reads as the verdict: the latched faults, then what the
  // check itself said when it ran ("nothing to check" of a check that found
  // no GPU to read is no reason for a fail).
  std::string summary = faulted.size() == 1
                          ? faulted.front()
                          : std::to_string(faulted.size()) + " GPUs have latched faults; the first: "
                              + faulted.front();
  if (check_ran && !check_said.empty())
    summary += "; the check: " + check_said;
  result->set_summary(summary);
}

validation_actor::behavior_type
validation_behavior(validation_actor::stateful_pointer<validation_state> self,
                    validation_config config) {
  auto& st = self->state;
  st.config = std::move(config);
  st.v = st.config.validation;
  if (st.config.resumed) {
    for (const auto& run : validation::resume(st.v))
      validation_detail::remove_run(self, run);
    for (int i = 0; i < st.v.steps_size(); ++i)
      if (st.v.steps(i).state() == validation::running) {
        spdlog::info("validation {}: {} on {} waits for its run {}, which went on through the "
                     "restart", st.v.id(), st.v.steps(i).check(), st.v.steps(i).machine(),
                     st.v.steps(i).run());
        st.unconfirmed.insert(i);
      }
    save(self);
  }
  self->send(self, atom::poll_v);
  return {
    [self](atom::poll) { poll(self); },
    [self](atom::remove, std::string& machine) {
      if (self->state.removed.count(machine))
        return;
      self->request(self->state.config.cluster, std::chrono::seconds{10}, atom::get_v, machine)
        .then([](machine_actor&) {},
              [self, machine](caf::error& err) {
                if (err.category() == caf::atom("astraeus")
                    && static_cast<ec>(err.code()) == ec::no_such_machine)
                  self->state.removed.insert(machine);
              });
    },
    [self](atom::stop, std::string& by, std::string& why) { return cancel(self, by, why); },
    [self](atom::get) -> v1::Validation { return self->state.v; },
  };
}

} // namespace astraeus
