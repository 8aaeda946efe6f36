// The validations actor's requests (from the CLI and the API, through the
// cluster) and its machine poll (validations_internal.hpp).

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include <spdlog/spdlog.h>

#include "actors/controller/cluster_requests.hpp"
#include "actors/validation/cluster_report.hpp"
#include "actors/validation/validation_plan.hpp"
#include "actors/validation/ib_port_exclusions.hpp"
#include "actors/validation/validations_internal.hpp"
#include "messages/error.hpp"
#include "messages/labels.hpp"
#include "store/store.hpp"

namespace astraeus::validation_detail {

namespace {

using rp_t = caf::typed_response_promise<v1::Response>;

v1::Response failure(uint64_t id, const caf::error& err) {
  return error_response(id, err);
}

v1::Response with_id(uint64_t id) {
  v1::Response out;
  out.set_id(id);
  return out;
}

caf::result<v1::Response> start(self_ptr self, const v1::Request& req) {
  auto rp = self->make_response_promise<v1::Response>();
  start_validation(self, req.start_validation(), "on-demand", req.caller().name(),
                   [rp, id = req.id()](caf::expected<v1::Validation> v) mutable {
                     if (!v) {
                       rp.deliver(failure(id, v.error()));
                       return;
                     }
                     auto out = with_id(id);
                     *out.mutable_validation() = std::move(*v);
                     rp.deliver(std::move(out));
                   });
  return rp;
}

v1::Response list(self_ptr self, const v1::Request& req) {
  auto out = with_id(req.id());
  std::vector<const v1::Validation*> all;
  for (const auto& [id, v] : self->state.validations)
    all.push_back(&v);
  std::sort(all.begin(), all.end(), [](const auto* a, const auto* b) {
    if (a->created_unix_ms() != b->created_unix_ms())
      return a->created_unix_ms() > b->created_unix_ms();
    return a->id() > b->id();
  });
  out.mutable_validations();  // an empty list is still a list (`-o json` prints {})
  for (const auto* v : all)
    *out.mutable_validations()->add_validations() = *v;
  return out;
}

v1::Response get(self_ptr self, const v1::Request& req) {
  const auto& id = req.get_validation().id();
  auto it = self->state.validations.find(id);
  if (it == self->state.validations.end())
    return failure(req.id(), caf::make_error(ec::invalid_request, "no validation named " + id));
  auto out = with_id(req.id());
  *out.mutable_validation() = it->second;
  return out;
}

caf::result<v1::Response> report(self_ptr self, const v1::Request& req) {
  auto& st = self->state;
  if (!st.cluster)
    return failure(req.id(), caf::make_error(ec::invalid_request, "not ready yet"));
  // A pool that cannot be a label's value is a typo, not an empty report.
  if (const auto& pool = req.get_report().pool(); !pool.empty())
    if (auto err = check_label("pool", pool))
      return failure(req.id(), std::move(err));
  auto rp = self->make_response_promise<v1::Response>();
  auto creq = cluster_request();
  creq.mutable_list_machines();
  self->request(st.cluster, std::chrono::seconds{10}, std::move(creq))
    .then(
      [self, rp, id = req.id(), pool = req.get_report().pool()](v1::Response& resp) mutable {
        if (resp.has_error()) {
          resp.set_id(id);
          rp.deliver(std::move(resp));
          return;
        }
        auto out = with_id(id);
        *out.mutable_report() =
          validation::build_report(resp.machines(), self->state.latest, pool,
                                   self->state.config.clock->now_unix_ms(),
                                   self->state.validations);
        rp.deliver(std::move(out));
      },
      [rp, id = req.id()](caf::error& err) mutable { rp.deliver(failure(id, err)); });
  return rp;
}

/// Stores `p` (stamped by `by`) as its pool's policy and applies it to the
/// pool's machines at once (not at the next poll).
v1::Response store_policy(self_ptr self, uint64_t id, v1::ValidationPolicy p,
                          const std::string& by) {
  auto& st = self->state;
  p.set_set_by(by);
  p.set_set_unix_ms(st.config.clock->now_unix_ms());
  if (auto err = st.config.store->put(family::validations, "policy/" + p.pool(), p, true))
    return failure(id, err);
  st.policies[p.pool()] = p;
  spdlog::info("validations: pool {} policy: acceptance {}, burn-in {} s, DCGM level {}",
               p.pool(), p.require_acceptance() ? "required" : "not required",
               p.burn_in_seconds(), p.dcgm_level());
  look_at_machines(self);
  auto out = with_id(id);
  *out.mutable_validation_policy() = std::move(p);
  return out;
}

/// A pool that begins to require acceptance keeps the machines it has
/// working (bring-up-a-gpu-cluster.md, step 6: "A machine that joins the
/// pool from now on waits as Accepting"): every machine in `pool` that has
/// reported (Up, Down or in Maintenance) is accepted first, with a reason
/// that says so; not one that asked for acceptance at install (--accept),
/// whose own acceptance still runs. `done` gets the first failure, naming
/// the machine, or none.
void keep_members_working(self_ptr self, const std::string& pool,
                          std::function<void(caf::error)> done) {
  auto req = cluster_request();
  req.mutable_list_machines();
  self->request(self->state.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self, pool, done](v1::Response& resp) {
        if (resp.has_error()) {
          done(caf::make_error(ec::invalid_request, "policy: cannot list pool " + pool
                                                      + "'s machines: "
                                                      + resp.error().message()));
          return;
        }
        std::vector<std::string> members;
        for (const auto& m : resp.machines().machines()) {
          auto label = m.labels().find("pool");
          bool reported = m.state() == v1::Machine::Up || m.state() == v1::Machine::Down
                          || m.state() == v1::Machine::Maintenance;
          if (label != m.labels().end() && label->second == pool && reported
              && !m.acceptance_requested())
            members.push_back(m.name());
        }
        if (members.empty()) {
          done(caf::none);
          return;
        }
        struct tally {
          size_t left;
          caf::error first;
        };
        auto t = std::make_shared<tally>(tally{members.size(), caf::none});
        auto one_done = [t, done](const std::string& machine, const caf::error& err) {
          if (err && !t->first)
            t->first = caf::make_error(ec::invalid_request,
                                       "policy: cannot keep " + machine
                                         + " working in its pool (" + render_error(err)
                                         + "); the policy is unchanged");
          if (--t->left == 0)
            done(t->first);
        };
        const auto reason = "in pool " + pool + " before the pool required acceptance";
        for (const auto& name : members)
          self->request(self->state.cluster, std::chrono::seconds{10}, atom::get_v, name)
            .then(
              [self, name, reason, one_done](machine_actor& m) {
                // Not required yet: the machine stays Up while it is
                // accepted; the policy is stored after.
                self->request(m, std::chrono::seconds{10}, atom::accept_v, false, true, reason)
                  .then([name, one_done](v1::MachineView&) { one_done(name, caf::none); },
                        [name, one_done](caf::error& err) { one_done(name, err); });
              },
              [name, one_done](caf::error& err) { one_done(name, err); });
      },
      [done](caf::error& err) { done(err); });
}

caf::result<v1::Response> set_policy(self_ptr self, const v1::Request& req) {
  auto& st = self->state;
  auto p = req.set_validation_policy().policy();
  if (p.pool().empty())
    return failure(req.id(), caf::make_error(ec::invalid_request, "policy: no pool named"));
  // A pool is a label's value: a policy for a pool no machine can be in is refused.
  if (auto err = check_label("pool", p.pool()))
    return failure(req.id(), err);
  if (auto err = validation::check_settings(p.burn_in_seconds(), {}))
    return failure(req.id(), err);
  if (p.dcgm_level() > 4)
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "policy: --dcgm-level "
                                               + std::to_string(p.dcgm_level())
                                               + " is not 1, 2, 3 or 4"));
  auto before = st.policies.find(p.pool());
  bool newly_required = p.require_acceptance()
                        && (before == st.policies.end() || !before->second.require_acceptance());
  if (!newly_required || !st.cluster)
    return store_policy(self, req.id(), std::move(p), req.caller().name());
  auto rp = self->make_response_promise<v1::Response>();
  auto pool = p.pool();
  keep_members_working(self, pool,
                       [self, rp, id = req.id(), p = std::move(p),
                        by = req.caller().name()](caf::error err) mutable {
                         if (err)
                           rp.deliver(failure(id, err));
                         else
                           rp.deliver(store_policy(self, id, std::move(p), by));
                       });
  return rp;
}

/// `astra astraeus policy delete POOL`: the pool's policy goes (stored
/// with sync); its machines no longer wait for acceptance. Answers the
/// policy as it was; ec::invalid_request when the pool has none.
v1::Response delete_policy(self_ptr self, const v1::Request& req) {
  auto& st = self->state;
  const auto& pool = req.delete_validation_policy().pool();
  auto it = st.policies.find(pool);
  if (it == st.policies.end())
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "no validation policy for pool '" + pool
                                               + "' (see `astra astraeus policy list`)"));
  if (auto err = st.config.store->erase(family::validations, "policy/" + pool, true))
    return failure(req.id(), err);
  auto out = with_id(req.id());
  *out.mutable_validation_policy() = std::move(it->second);
  st.policies.erase(it);
  spdlog::info("validations: pool {} policy deleted", pool);
  look_at_machines(self);
  return out;
}

caf::result<v1::Response> accept(self_ptr self, const v1::Request& req) {
  const auto& body = req.accept_machine();
  if (body.machine().empty())
    return failure(req.id(), caf::make_error(ec::invalid_request, "accept: no machine named"));
  if (body.reason().find_first_not_of(" \t\r\n") == std::string::npos)
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "accept: --reason is required (it is audited)"));
  auto rp = self->make_response_promise<v1::Response>();
  accept_machine(self, body.machine(), body.reason(),
                 [rp, id = req.id()](caf::expected<v1::MachineView> m) mutable {
                   if (!m) {
                     rp.deliver(failure(id, m.error()));
                     return;
                   }
                   auto out = with_id(id);
                   *out.mutable_machine() = std::move(*m);
                   rp.deliver(std::move(out));
                 },
                 true);
  return rp;
}

/// `astra astraeus cancel ID` / DELETE /validations/ID (admins): the
/// validation's actor cancels it (its steps not ended are Cancelled, their
/// runs removed) and answers with it. One not known, or ended already, is
/// refused naming it.
caf::result<v1::Response> cancel(self_ptr self, const v1::Request& req) {
  auto& st = self->state;
  const auto& body = req.cancel_validation();
  if (body.id().empty())
    return failure(req.id(), caf::make_error(ec::invalid_request, "cancel: no validation named"));
  // The reason is kept with the validation and each step: one line of
  // words, as an audit reason is.
  if (body.reason().size() > 1000)
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "cancel: the reason is "
                                               + std::to_string(body.reason().size())
                                               + " bytes: at most 1000"));
  if (std::any_of(body.reason().begin(), body.reason().end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "cancel: the reason has a control character "
                                             "(a newline, a tab): give it on one line"));
  auto it = st.validations.find(body.id());
  if (it == st.validations.end())
    return failure(req.id(), caf::make_error(ec::invalid_request,
                                             "no validation named " + body.id()
                                               + " (astra astraeus validations lists them)"));
  if (it->second.state() != "Running")
    return failure(req.id(),
                   caf::make_error(ec::failed_precondition,
                                   "validation " + body.id() + " has ended ("
                                     + it->second.state() + "): nothing to cancel"));
  const auto by = req.caller().name();
  auto actor = st.running.find(body.id());
  if (actor == st.running.end()) {
    // Its actor is gone (it cannot be while Running, but a stored copy is
    // what users see): the copy is cancelled and stored as its actor would.
    auto v = it->second;
    validation::cancel(v, by, body.reason(), st.config.clock->now_unix_ms());
    if (auto err = st.config.store->put(family::validations, "val/" + v.id(), v, true))
      return failure(req.id(), err);
    self->send(self, atom::validate_v, v);  // its slots go, its machines are told
    auto out = with_id(req.id());
    *out.mutable_validation() = std::move(v);
    return out;
  }
  auto rp = self->make_response_promise<v1::Response>();
  self->request(actor->second, std::chrono::seconds{10}, atom::stop_v, by, body.reason())
    .then(
      [rp, id = req.id()](v1::Validation& v) mutable {
        auto out = with_id(id);
        *out.mutable_validation() = std::move(v);
        rp.deliver(std::move(out));
      },
      [rp, id = req.id()](caf::error& err) mutable { rp.deliver(failure(id, err)); });
  return rp;
}

v1::Response policies(self_ptr self, const v1::Request& req) {
  auto out = with_id(req.id());
  for (const auto& [pool, p] : self->state.policies)
    *out.mutable_validation_policies()->add_policies() = p;
  return out;
}

/// Whether a running validation has `check` not yet done on `machine`.
bool pending(self_ptr self, const std::string& machine, const std::string& check) {
  for (const auto& [id, v] : self->state.validations) {
    if (v.state() != "Running")
      continue;
    for (const auto& s : v.steps())
      if (s.machine() == machine && s.check() == check && s.state() != validation::done
          && s.state() != validation::failed)
        return true;
  }
  return false;
}

/// Tells `machine` which acceptance runs there: an Accepting one's waiting
/// reasons name it ("gpu-03 is Accepting (acceptance val-… runs there)"),
/// and a machine installed with --accept shows it (`acceptance_validation`).
/// `required`: whether its pool requires acceptance (unchanged by this).
void tell_acceptance(self_ptr self, const std::string& machine, const std::string& id,
                     bool required) {
  auto& st = self->state;
  if (!st.cluster)
    return;
  self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, machine)
    .then(
      [self, id, required](machine_actor& h) {
        self->request(h, std::chrono::seconds{10}, atom::accept_v, required, false, id)
          .then([](v1::MachineView&) {}, [](caf::error&) {});
      },
      [](caf::error&) {});
}

void start_for(self_ptr self, const std::string& machine, const std::string& suite,
               const v1::ValidationPolicy* policy, const std::string& trigger) {
  v1::StartValidation start;
  start.set_suite(suite);
  start.set_machine(machine);
  if (policy) {
    start.set_burn_in_seconds(policy->burn_in_seconds());
    start.set_dcgm_level(policy->dcgm_level());
  }
  start_validation(self, start, trigger, "astraeus", [self, machine, suite](auto v) {
    if (!v) {
      spdlog::warn("validations: cannot start {} on {}: {}", suite, machine,
                   render_error(v.error()));
      return;
    }
    if (suite == "acceptance")
      tell_acceptance(self, machine, v->id(), true);
  });
}

} // namespace

void on_fault_cleared(self_ptr self, const std::string& machine) {
  auto& st = self->state;
  if (!st.config.quick_on_up)
    return;
  auto latest = st.latest.find({machine, "quick"});
  if (latest == st.latest.end() || latest->second.verdict() != "fail"
      || pending(self, machine, "quick"))
    return;
  spdlog::info("validations: a fault was cleared on {}, whose quick check failed: a quick "
               "check again", machine);
  start_for(self, machine, "quick", nullptr, "automatic");
}

caf::result<v1::Response> answer(self_ptr self, const v1::Request& req) {
  using R = v1::Request;
  switch (req.body_case()) {
  case R::kStartValidation: return start(self, req);
  case R::kListValidations: return list(self, req);
  case R::kGetValidation: return get(self, req);
  case R::kGetReport: return report(self, req);
  case R::kSetValidationPolicy: return set_policy(self, req);
  case R::kAcceptMachine: return accept(self, req);
  case R::kListValidationPolicies: return policies(self, req);
  case R::kDeleteValidationPolicy: return delete_policy(self, req);
  case R::kCancelValidation: return cancel(self, req);
  default:
    return failure(req.id(), caf::make_error(ec::invalid_request, "not a validation request"));
  }
}

namespace {

/// Whether `machine`, seen Up now and not at the last look, is one whose
/// quick check was restored at a restart within quick_restore_grace: its
/// agent reconnecting, not a machine coming Up (no quick check then).
bool reconnected_after_restart(self_ptr self, const std::string& machine) {
  auto& st = self->state;
  auto it = st.quick_restored.find(machine);
  if (it == st.quick_restored.end())
    return false;
  bool within = self->clock().now() - it->second <= quick_restore_grace;
  st.quick_restored.erase(it);
  return within;
}

} // namespace

void look_at_machines(self_ptr self) {
  auto& st = self->state;
  if (!st.cluster)
    return;
  auto req = cluster_request();
  req.mutable_list_machines();
  self->request(st.cluster, std::chrono::seconds{10}, std::move(req))
    .then(
      [self](v1::Response& resp) {
        auto& st = self->state;
        std::set<std::string> up;
        std::map<std::string, int> gpus_seen, usable_seen;
        for (const auto& m : resp.machines().machines()) {
          bool is_up = m.state() == v1::Machine::Up || m.state() == v1::Machine::Accepting;
          auto pool = m.labels().find("pool");
          const v1::ValidationPolicy* policy = nullptr;
          if (pool != m.labels().end())
            if (auto p = st.policies.find(pool->second); p != st.policies.end())
              policy = &p->second;
          bool required = policy && policy->require_acceptance();
          auto told = st.told_required.find(m.name());
          if (told == st.told_required.end() || told->second != required) {
            st.told_required[m.name()] = required;
            self->request(st.cluster, std::chrono::seconds{10}, atom::get_v, m.name())
              .then(
                [self, required](machine_actor& h) {
                  self->request(h, std::chrono::seconds{10}, atom::accept_v, required, false,
                                std::string{})
                    .then([](v1::MachineView&) {}, [](caf::error&) {});
                },
                [](caf::error&) {});
          }
          if (!is_up)
            continue;
          up.insert(m.name());
          const int gpus = m.facts().gpus().gpus_size();
          gpus_seen[m.name()] = gpus;
          auto seen = st.gpus_seen.find(m.name());
          // The GPUs runs can have: those the scheduler set aside (a UUID
          // another machine reports too) given back bring a new quick check
          // where the last one failed (it kept its fail after the fix).
          const int usable = gpus - m.set_aside_gpus_size();
          usable_seen[m.name()] = usable;
          auto usable_before = st.usable_seen.find(m.name());
          auto quick = st.latest.find({m.name(), "quick"});
          const bool given_back = st.up.count(m.name()) && usable_before != st.usable_seen.end()
                                  && usable > usable_before->second
                                  && quick != st.latest.end()
                                  && quick->second.verdict() == "fail";
          // GPUs that appeared since the last look (a driver loaded after
          // the machine joined): the quick check from before them said
          // what no longer is (a new-user trial kept a "fail" from before
          // the driver loaded).
          const bool more_gpus = (st.up.count(m.name()) && seen != st.gpus_seen.end()
                                  && gpus > seen->second)
                                 || given_back;
          bool accepting = required && !m.accepted() && m.state() == v1::Machine::Accepting;
          if (accepting && !st.acceptance_started.count(m.name())
              && !pending(self, m.name(), "burn")) {
            st.acceptance_started.insert(m.name());
            start_for(self, m.name(), "acceptance", policy, "policy");
          } else if (!st.up.count(m.name()) && st.config.quick_on_up
                     && !pending(self, m.name(), "quick")
                     && !reconnected_after_restart(self, m.name())) {
            start_for(self, m.name(), "quick", nullptr, "automatic");
          } else if (more_gpus && st.config.quick_on_up && !accepting
                     && !pending(self, m.name(), "quick")) {
            spdlog::info("validations: {} reports {} GPU(s) runs can have, {} at the last "
                         "look: a quick check again", m.name(), usable,
                         usable_before != st.usable_seen.end() ? usable_before->second : 0);
            start_for(self, m.name(), "quick", nullptr, "automatic");
          }
        }
        st.up = std::move(up);
        st.gpus_seen = std::move(gpus_seen);
        st.usable_seen = std::move(usable_seen);
        tell_removed(self, resp.machines());
        tell_degraded_ports(self, resp.machines());
        start_installer_batch(self, resp.machines());
      },
      [](caf::error&) {});
}

void tell_removed(self_ptr self, const v1::MachineList& machines) {
  auto& st = self->state;
  std::set<std::string> listed;
  for (const auto& m : machines.machines())
    listed.insert(m.name());
  for (const auto& [id, actor] : st.running) {
    auto v = st.validations.find(id);
    if (v == st.validations.end())
      continue;
    for (const auto& m : v->second.machines())
      if (!listed.count(m))
        self->send(actor, atom::remove_v, m);
  }
}

void tell_degraded_ports(self_ptr self, const v1::MachineList& machines) {
  auto& st = self->state;
  auto list = validation::ib_port_exclusions(machines, st.latest, st.policies);
  std::map<std::string, std::string> now;
  for (const auto& m : list.machines())
    now[m.machine()] = m.SerializeAsString();
  // The scheduler starts with none: nothing to say until a port is degraded.
  if (now == st.degraded_told)
    return;
  for (const auto& m : list.machines()) {
    auto before = st.degraded_told.find(m.machine());
    if (before != st.degraded_told.end() && before->second == now[m.machine()])
      continue;
    for (const auto& p : m.ports())
      if (p.kept())
        spdlog::warn("validations: {} {} is degraded ({}); NCCL_IB_HCA keeps it: leaving out "
                     "every degraded port would leave no port", m.machine(), p.port(), p.why());
      else
        spdlog::info("validations: {} {} is degraded ({}); NCCL_IB_HCA leaves it out",
                     m.machine(), p.port(), p.why());
  }
  for (const auto& [name, bytes] : st.degraded_told)
    if (!now.count(name))
      spdlog::info("validations: {} has no degraded RDMA port now", name);
  st.degraded_told = std::move(now);
  if (st.config.scheduler)
    self->send(st.config.scheduler, std::move(list));
}

void start_installer_batch(self_ptr self, const v1::MachineList& machines) {
  auto& st = self->state;
  // The batch delay is a duration (issue 23 item 4): timed on the actor
  // clock from when this actor first saw each machine ask, so a wall clock
  // set back or forward neither holds the batch nor starts it early (after
  // a controller restart a batch waits the whole delay again).
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               self->clock().now().time_since_epoch())
               .count();
  // Machines an installer acceptance covers already (stored validations
  // too, so a controller restart does not start a second).
  std::set<std::string> covered = st.installer_started;
  for (const auto& [id, v] : st.validations)
    if (v.trigger() == "installer")
      covered.insert(v.machines().begin(), v.machines().end());
  std::vector<validation::batch_candidate> candidates;
  for (const auto& m : machines.machines()) {
    if (!m.acceptance_requested() || covered.count(m.name())
        || st.acceptance_started.count(m.name()))
      continue;
    auto seen = st.requested_seen.emplace(m.name(), now).first->second;
    candidates.push_back({m.name(), seen,
                          m.state() == v1::Machine::Up || m.state() == v1::Machine::Accepting});
  }
  auto batch = validation::due_batch(candidates, now, st.config.installer_delay.count());
  if (batch.empty())
    return;
  st.installer_started.insert(batch.begin(), batch.end());
  v1::StartValidation start;
  start.set_suite("acceptance");
  start.set_note("installed with --accept");
  start_validation(
    self, start, "installer", "astraeus",
    [self, batch](caf::expected<v1::Validation> v) {
      if (!v) {
        spdlog::warn("validations: cannot start the installer's acceptance: {}",
                     render_error(v.error()));
        for (const auto& m : batch)
          self->state.installer_started.erase(m);
        return;
      }
      // A new-user trial read `acceptance_requested: true` beside
      // `acceptance_validation: ""` while the acceptance ran.
      for (const auto& m : v->machines()) {
        auto told = self->state.told_required.find(m);
        tell_acceptance(self, m, v->id(),
                        told != self->state.told_required.end() && told->second);
      }
    },
    batch);
}

} // namespace astraeus::validation_detail
