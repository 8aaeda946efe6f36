// The validations of a controller (validations_actor.hpp): starting
// validations, the machines' check slots, the latest results, policies.
// Its CLI and API requests: validations_requests.cpp.

#include "actors/validation/validations_actor.hpp"

#include <algorithm>
#include <map>

#include <spdlog/spdlog.h>

#include "actors/validation/validation_actor.hpp"
#include "actors/validation/validation_plan.hpp"
#include "actors/validation/validations_internal.hpp"
#include "messages/error.hpp"
#include "store/store.hpp"

namespace astraeus::validation_detail {

v1::Request cluster_request() {
  v1::Request req;
  *req.mutable_caller() = validation_principal();
  return req;
}

void spawn_validation(self_ptr self, const v1::Validation& v, bool resumed) {
  auto& st = self->state;
  validation_config vc;
  vc.store = st.config.store;
  vc.scheduler = st.config.scheduler;
  vc.cluster = st.cluster;
  vc.owner = validations_actor{self};
  vc.check_program = st.config.check_program;
  vc.poll_interval = st.config.poll_interval;
  vc.clock = st.config.clock;
  vc.validation = v;
  vc.resumed = resumed;
  st.running[v.id()] = self->spawn(validation_behavior, std::move(vc));
}

void start_validation(self_ptr self, v1::StartValidation start, std::string trigger,
                      std::string created_by, started_fn done,
                      std::vector<std::string> batch) {
  auto& st = self->state;
  // No suite named: a full acceptance, as `astra astraeus validate` without
  // --suite (the API and the CLI agree).
  if (start.suite().empty())
    start.set_suite("acceptance");
  if (!validation::known_suite(start.suite())) {
    done(caf::make_error(ec::invalid_request, "unknown suite '" + start.suite()
                                                + "': one of " + validation::suite_names()));
    return;
  }
  if (auto err = validation::check_settings(start.burn_in_seconds(), start.data_dir())) {
    done(err);
    return;
  }
  // As a policy's (a new-user trial's API request ran dcgmi diag with
  // level 9 and the check's usage text failed the step).
  if (start.dcgm_level() > 4) {
    done(caf::make_error(ec::invalid_request, "dcgm_level " + std::to_string(start.dcgm_level())
                                                + " is not 1, 2, 3 or 4 (0: the default, 2)"));
    return;
  }
  // In the request's own field names: the API and the console send it so
  // (astra checks its --pool and --machine before sending).
  if (batch.empty() && start.pool().empty() == start.machine().empty()) {
    done(caf::make_error(ec::invalid_request,
                         start.pool().empty()
                           ? "name the machines to check: give \"pool\" or \"machine\""
                           : "name the machines to check: give \"pool\" or \"machine\", not "
                             "both"));
    return;
  }
  if (start.suite() == "network" && !start.machine().empty()) {
    done(caf::make_error(ec::invalid_request,
                         "the network suite measures pairs of machines: one machine ("
                           + start.machine()
                           + ") was named; name a pool of two or more machines that are Up"));
    return;
  }
  if (!st.cluster) {
    done(caf::make_error(ec::invalid_request, "the validations are not ready yet"));
    return;
  }
  auto req = cluster_request();
  req.mutable_list_machines();
  self->request(st.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, start, trigger, created_by, done, batch](v1::Response& resp) {
        if (resp.has_error()) {
          done(caf::make_error(ec::invalid_request, resp.error().message()));
          return;
        }
        std::vector<std::string> names;
        bool known = false;
        std::string one_state;  // the state of the machine asked for by name
        for (const auto& m : resp.machines().machines()) {
          auto p = m.labels().find("pool");
          bool member = !batch.empty()
                          ? std::find(batch.begin(), batch.end(), m.name()) != batch.end()
                          : start.machine().empty()
                          ? p != m.labels().end() && p->second == start.pool()
                          : m.name() == start.machine();
          if (!member)
            continue;
          known = true;
          one_state = v1::Machine::State_Name(m.state());
          if (m.state() == v1::Machine::Up || m.state() == v1::Machine::Accepting)
            names.push_back(m.name());
        }
        if (names.empty()) {
          std::string what = !batch.empty()            ? std::string{"the batch"}
                             : start.machine().empty() ? "pool " + start.pool()
                                                       : "machine " + start.machine();
          // "machine gpu-02 is Maintenance", not "no machine of machine
          // gpu-02 is Up".
          // A machine nobody knows is 404 NO_SUCH_MACHINE, as on every
          // other route that names one.
          const bool unknown_machine = !known && batch.empty() && !start.machine().empty();
          done(caf::make_error(unknown_machine ? ec::no_such_machine : ec::invalid_request,
                               known && batch.empty() && !start.machine().empty()
                                 ? what + " is " + one_state + ": a validation runs on a "
                                     "machine that is Up"
                               : known ? "no machine of " + what + " is Up"
                                     : start.machine().empty()
                                         ? "no machine in pool " + start.pool()
                                         : "no machine named " + start.machine()));
          return;
        }
        std::sort(names.begin(), names.end());
        if (start.suite() == "network" && names.size() < 2) {
          done(caf::make_error(ec::invalid_request,
                               "the network suite measures pairs of machines: only "
                                 + names.front() + " of pool " + start.pool()
                                 + " is Up; it needs two or more"));
          return;
        }
        auto& st = self->state;
        // An acceptance run by hand on a pool's machines is the pool's
        // acceptance: its policy's burn-in and DCGM level unless the
        // request gives its own (a new-user trial re-ran a 20-minute
        // policy's acceptance with the default 10m).
        auto start_with = start;
        if (start.suite() == "acceptance") {
          std::set<std::string> pools;
          for (const auto& m : resp.machines().machines())
            if (std::find(names.begin(), names.end(), m.name()) != names.end()) {
              auto p = m.labels().find("pool");
              pools.insert(p == m.labels().end() ? std::string{} : p->second);
            }
          auto policy = pools.size() == 1 ? st.policies.find(*pools.begin()) : st.policies.end();
          if (policy != st.policies.end()) {
            if (start_with.burn_in_seconds() == 0)
              start_with.set_burn_in_seconds(policy->second.burn_in_seconds());
            if (start_with.dcgm_level() == 0)
              start_with.set_dcgm_level(policy->second.dcgm_level());
          }
        }
        auto now = st.config.clock->now_unix_ms();
        std::string id;
        do
          id = validation::make_id(now, st.rng());
        while (st.validations.count(id));
        auto v = validation::make_validation(id, start_with, names, trigger, now);
        v.set_created_by(created_by);
        auto console = console_base(st.config.console_url, st.config.install.get());
        if (!console.empty())
          v.set_console_url(console + "/o/" + st.config.organization
                            + "/w/default/validation?cluster=" + st.config.cluster_name
                            + "&validation=" + id);
        if (auto err = st.config.store->put(family::validations, "val/" + id, v, true)) {
          done(err);
          return;
        }
        st.validations[id] = v;
        spawn_validation(self, v, false);
        spdlog::info("validations: {} ({}): {} on {} machine(s)", id, trigger, v.suite(),
                     names.size());
        done(v);
      },
      [done](caf::error& err) { done(err); });
}

namespace {

caf::result<std::string> on_slot(self_ptr self, const std::string& machine,
                                 const std::string& id, bool want) {
  auto& st = self->state;
  auto held = st.slots.find(machine);
  if (!want) {
    if (held != st.slots.end() && held->second == id)
      st.slots.erase(held);
    return std::string{};
  }
  // A validation that ended (cancelled while its ask was on the way) is
  // given no slot.
  if (!st.running.count(id))
    return "validation " + id + " has ended";
  if (held != st.slots.end())
    return held->second == id ? std::string{} : machine + ": another check runs there";
  // Held at once (no second grant while the GPUs are looked at).
  st.slots[machine] = id;
  auto rp = self->make_response_promise<std::string>();
  auto req = cluster_request();
  req.mutable_list_gpus()->set_machine(machine);
  self->request(st.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, rp, machine, id](v1::Response& resp) mutable {
        std::string busy;
        for (const auto& g : resp.gpus().gpus())
          if (!g.holder().empty() && g.holder().rfind("validation ", 0) != 0)
            busy = g.holder();
        if (resp.has_error() || busy.empty()) {
          rp.deliver(std::string{});
          return;
        }
        auto& st = self->state;
        if (auto h = st.slots.find(machine); h != st.slots.end() && h->second == id)
          st.slots.erase(h);
        rp.deliver(machine + ": its GPUs are in use by " + busy + "; the check waits");
      },
      [self, rp, machine, id](caf::error& err) mutable {
        auto& st = self->state;
        if (auto h = st.slots.find(machine); h != st.slots.end() && h->second == id)
          st.slots.erase(h);
        rp.deliver(machine + ": cannot look at its GPUs (" + render_error(err) + ")");
      });
  return rp;
}

void on_step(self_ptr self, v1::ValidationStep& step) {
  auto& st = self->state;
  auto latest = validation::latest_key(step);
  auto key = "latest/" + latest.first + "/" + latest.second;
  if (auto err = st.config.store->put(family::validations, key, step, true))
    spdlog::error("validations: cannot store {}: {}", key, render_error(err));
  if (step.check() == "quick" && st.cluster) {
    // The machine actor is reached through the cluster's look-up.
    self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, step.machine())
      .then([self, step](machine_actor& m) { self->send(m, atom::validate_v, step); },
            [](caf::error&) {});
  }
  st.latest[latest] = std::move(step);
}

void on_validation(self_ptr self, v1::Validation& v) {
  auto& st = self->state;
  bool ended = v.state() != "Running";
  if (ended) {
    st.running.erase(v.id());
    for (auto it = st.slots.begin(); it != st.slots.end();)
      it = it->second == v.id() ? st.slots.erase(it) : std::next(it);
    if (v.suite() == "acceptance")
      for (const auto& m : v.machines()) {
        auto verdict = validation::machine_verdict(v, m);
        if (verdict == "pass" || verdict == "warn") {
          accept_machine(self, m, "", [](caf::expected<v1::MachineView>) {});
        } else if (st.cluster) {
          // Its waiting reasons stop saying that the acceptance runs there.
          self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, m)
            .then([self, v](machine_actor& h) { self->send(h, atom::accept_v, v); },
                  [](caf::error&) {});
        }
      }
  }
  st.validations[v.id()] = std::move(v);
}

/// After a restart, the acceptances stored: a machine that had one is not
/// given another by its pool's policy (as before the restart: an admin
/// re-runs it with `astra astraeus validate --suite acceptance`), and a
/// machine whose latest acceptance ended without passing it is told again,
/// so its waiting reasons still say which one failed and how to accept it
/// anyway (what on_validation told it when it ended).
void restore_acceptances(self_ptr self) {
  auto& st = self->state;
  std::map<std::string, const v1::Validation*> latest;
  for (const auto& [id, v] : st.validations) {
    if (v.suite() != "acceptance")
      continue;
    for (const auto& m : v.machines()) {
      st.acceptance_started.insert(m);
      auto& at = latest[m];
      if (at == nullptr || v.created_unix_ms() > at->created_unix_ms()
          || (v.created_unix_ms() == at->created_unix_ms() && v.id() > at->id()))
        at = &v;
    }
  }
  for (const auto& [m, v] : latest) {
    if (v->state() == "Running")
      continue;
    auto verdict = validation::machine_verdict(*v, m);
    if (verdict == "pass" || verdict == "warn")
      continue;
    self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, m)
      .then([self, copy = *v](machine_actor& h) { self->send(h, atom::accept_v, copy); },
            [](caf::error&) {});
  }
}

/// After a restart (or an HA takeover), the quick checks stored: each
/// machine's QUICK badge is told again, and a machine with one that is seen
/// Up within quick_restore_grace is taken for one that was Up already (its
/// agent reconnecting), so a restart does not run a quick check on every
/// machine again (a user trial); one that comes Up later gets one, as before.
void restore_quick_checks(self_ptr self) {
  auto& st = self->state;
  // One that a restart interrupted is resumed (it gives the badge).
  for (const auto& [id, v] : st.validations)
    if (v.suite() == "quick" && v.state() == "Running")
      for (const auto& m : v.machines())
        st.quick_restored[m] = self->clock().now();
  for (const auto& [key, step] : st.latest) {
    if (key.second != "quick")
      continue;
    st.quick_restored[key.first] = self->clock().now();
    self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, key.first)
      .then([self, step = step](machine_actor& m) { self->send(m, atom::validate_v, step); },
            [](caf::error&) {});
  }
}

void load(self_ptr self) {
  auto& st = self->state;
  auto err = st.config.store->for_each(
    family::validations, [&](std::string_view key, std::string_view bytes) {
      auto parse = [&](google::protobuf::Message& m) {
        return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
      };
      if (key.rfind("val/", 0) == 0) {
        v1::Validation v;
        if (parse(v))
          st.validations[v.id()] = std::move(v);
      } else if (key.rfind("latest/", 0) == 0) {
        v1::ValidationStep s;
        if (parse(s))
          st.latest[validation::latest_key(s)] = std::move(s);
      } else if (key.rfind("policy/", 0) == 0) {
        v1::ValidationPolicy p;
        if (parse(p))
          st.policies[p.pool()] = std::move(p);
      }
      return true;
    });
  if (err)
    spdlog::error("validations: cannot load: {}", render_error(err));
}

/// The latest acceptance that judged `machine` (ended, not cancelled),
/// when it failed there: the validation; nullptr when none did, or the
/// latest passed, warned or was skipped. A cancelled one judged nothing (a
/// ninth trial accepted a machine "as-is" whose acceptance had passed,
/// after cancelling a second one), and one still running is not yet a
/// verdict.
const v1::Validation* failed_acceptance(const validations_state& st,
                                        const std::string& machine) {
  const v1::Validation* latest = nullptr;
  for (const auto& [id, v] : st.validations) {
    if (v.suite() != "acceptance" || v.state() == "Running" || v.state() == "Cancelled"
        || std::find(v.machines().begin(), v.machines().end(), machine) == v.machines().end())
      continue;
    if (!latest || v.created_unix_ms() > latest->created_unix_ms())
      latest = &v;
  }
  if (!latest)
    return nullptr;
  return validation::machine_verdict(*latest, machine) == "fail" ? latest : nullptr;
}

} // namespace

void accept_machine(self_ptr self, const std::string& machine, const std::string& reason,
                    accepted_fn done, bool only_waiting) {
  auto& st = self->state;
  if (!st.cluster) {
    done(caf::make_error(ec::invalid_request, "the validations are not ready yet"));
    return;
  }
  self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, machine)
    .then(
      [self, machine, reason, done, only_waiting](machine_actor& m) {
        self->request(m, std::chrono::seconds{10}, atom::get_v)
          .then(
            [self, m, machine, reason, done, only_waiting](v1::MachineView& view) {
              auto pool = view.labels().find("pool");
              auto& st = self->state;
              auto p = pool == view.labels().end() ? st.policies.end()
                                                   : st.policies.find(pool->second);
              bool required = p != st.policies.end() && p->second.require_acceptance();
              // A new-user trial: accepting an Up machine said "accepted"
              // and changed nothing.
              bool waiting = (required && !view.accepted()) || view.acceptance_requested();
              // The bring-up seed's troubleshooting: acceptance failed on one
              // machine, and the admin ships it as-is ("accept it anyway with
              // a reason"), although with no pool policy it is Up already.
              // Once only: accepted so already, it is refused as accepted.
              bool already = view.accepted() || !view.accepted_reason().empty();
              bool failed = !already && failed_acceptance(st, machine) != nullptr;
              if (only_waiting && !waiting && !failed) {
                auto state = v1::Machine::State_Name(view.state());
                done(caf::make_error(ec::failed_precondition,
                                     "machine " + machine + " is not Accepting (it is " + state
                                       + (already ? ", accepted already)"
                                                  : ") and no acceptance of it failed")
                                       + ": nothing to accept"));
                return;
              }
              st.told_required[machine] = required;
              self->request(m, std::chrono::seconds{10}, atom::accept_v, required, true, reason)
                .then([done](v1::MachineView& v) { done(v); },
                      [done](caf::error& err) { done(err); });
            },
            [done](caf::error& err) { done(err); });
      },
      [done](caf::error& err) { done(err); });
}

} // namespace astraeus::validation_detail

namespace astraeus {

using namespace validation_detail;

validations_actor::behavior_type
validations(validations_actor::stateful_pointer<validations_state> self,
            validations_config config) {
  auto& st = self->state;
  st.config = std::move(config);
  st.rng.seed(st.config.seed != 0 ? st.config.seed : std::random_device{}());
  load(self);
  return {
    [self](v1::Request& req) -> caf::result<v1::Response> { return answer(self, req); },
    [self](atom::attach, cluster_actor& cluster) {
      auto& st = self->state;
      bool first = !st.cluster;
      st.cluster = std::move(cluster);
      if (!first)
        return;
      for (const auto& [id, v] : st.validations) {
        if (v.state() != "Running")
          continue;
        // A check that went on through the restart keeps its machines'
        // slots: no other check is granted them while it runs.
        auto resumed = v;
        validation::resume(resumed);
        for (const auto& m : validation::held_machines(resumed))
          st.slots[m] = id;
        spawn_validation(self, v, true);
      }
      restore_acceptances(self);
      restore_quick_checks(self);
      self->send(self, atom::poll_v);
    },
    [self](atom::slot, std::string& machine, std::string& id, bool want) {
      return on_slot(self, machine, id, want);
    },
    [self](atom::validate, v1::ValidationStep& step) { on_step(self, step); },
    [self](atom::validate, v1::Validation& v) { on_validation(self, v); },
    [self](atom::clear, std::string& machine) { on_fault_cleared(self, machine); },
    [self](atom::poll) {
      look_at_machines(self);
      self->delayed_send(self, self->state.config.machine_poll, atom::poll_v);
    },
  };
}

} // namespace astraeus
