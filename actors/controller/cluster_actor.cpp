#include "actors/controller/cluster_actor.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <tuple>

#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/gather.hpp"
#include "actors/controller/machine_actor.hpp"
#include "messages/error.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

v1::Response error_response(uint64_t id, const caf::error& err) {
  v1::Response out;
  out.set_id(id);
  auto* e = out.mutable_error();
  if (err.category() == caf::atom("astraeus"))
    e->set_code(to_string(static_cast<ec>(err.code())));
  else
    e->set_code(caf::to_string(err.category()));
  e->set_message(render_error(err));
  return out;
}

using cluster_ptr = cluster_actor::stateful_pointer<cluster_state>;

/// Now on the cluster's wall clock, Unix ms.
int64_t now_ms(cluster_ptr self) {
  return self->state.config.clock->now_unix_ms();
}

/// Keeps an audit record (who, what, when, result) with sync, and logs it.
void audit(cluster_ptr self, const v1::Principal& who, const std::string& action,
           const std::string& target, const std::string& result) {
  v1::AuditRecord rec;
  rec.set_unix_ms(now_ms(self));
  rec.set_who(who.name().empty() ? std::string{"cli"}
                                 : who.name() + " (" + who.role() + ", token "
                                     + who.token_id() + ")");
  rec.set_action(action);
  rec.set_target(target);
  rec.set_result(result);
  char key[64];
  std::snprintf(key, sizeof(key), "%020lld-%08llu",
                static_cast<long long>(rec.unix_ms()),
                static_cast<unsigned long long>(++self->state.audit_seq));
  if (auto err = self->state.config.store->put(family::audit, key, rec, true))
    spdlog::error("cluster: cannot store an audit record: {}", render_error(err));
  spdlog::info("cluster: audit: {} {} {}: {}", rec.who(), action, target, result);
}

/// What an audit record says of a response.
std::string outcome(const v1::Response& resp) {
  return resp.has_error() ? "failed: " + resp.error().message() : "ok";
}

/// The request's body name, e.g. "set_cordon".
std::string request_kind(const v1::Request& req) {
  auto* field = req.GetDescriptor()->FindFieldByNumber(req.body_case());
  return field != nullptr ? field->name() : std::string{"unknown request"};
}

std::string key_store_name(const std::string& machine) {
  return "machine/" + machine;
}

} // namespace

role required_role(const v1::Request& req) {
  switch (req.body_case()) {
    case v1::Request::kListMachines:
    case v1::Request::kGetMachine:
    case v1::Request::kListGpus:
    case v1::Request::kXidPolicy:
    case v1::Request::kListRuns:
    case v1::Request::kGetRun:
    case v1::Request::kSubmitRun:
    case v1::Request::kDeleteRun:
    case v1::Request::kWhoami:
    case v1::Request::kListWorkspaces:
    case v1::Request::kGetLogs:
      return role::member;
    case v1::Request::kSetCordon:
    case v1::Request::kSetMaintenance:
    case v1::Request::kClearFault:
    case v1::Request::kCreateJoinToken:
    case v1::Request::kCreateApiToken:
    case v1::Request::kRevokeApiToken:
    case v1::Request::kListAudit:
    case v1::Request::kCreateWorkspace:
      return role::admin;
    default:
      return role::admin;
  }
}

bool valid_machine_name(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
           || c == '.';
  });
}

caf::error validate_workspace(v1::Workspace& ws) {
  const auto& n = ws.name();
  auto word = [](const std::string& s) {
    return !s.empty() && s.size() <= 63
           && std::isalnum(static_cast<unsigned char>(s[0]))
           && std::all_of(s.begin(), s.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
              });
  };
  if (!word(n))
    return caf::make_error(ec::invalid_request,
                           "workspace name '" + n
                             + "': use 1-63 letters, digits and '-', starting "
                               "with a letter or digit");
  if (ws.organisation().empty())
    ws.set_organisation("default");
  else if (!word(ws.organisation()))
    return caf::make_error(ec::invalid_request,
                           "organisation '" + ws.organisation()
                             + "': use 1-63 letters, digits and '-'");
  auto blank = [](const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isspace(c) != 0 || std::iscntrl(c) != 0;
    });
  };
  for (const auto& [k, v] : ws.grants())
    if (k.empty() || v.empty() || k.find('=') != std::string::npos || blank(k)
        || blank(v))
      return caf::make_error(ec::invalid_request,
                             "grant '" + k + "=" + v
                               + "': give each grant as KEY=VALUE without spaces, "
                                 "e.g. pool=h100");
  return caf::none;
}

caf::error apply_workspace(const v1::Workspace* ws, v1::RunSpec& spec) {
  if (spec.workspace().empty())
    spec.set_workspace(default_workspace);
  // Full names carry the workspace's namespace; the default workspace has
  // none. Never the client's word.
  spec.set_namespace_(ws == nullptr ? std::string{} : ws->namespace_());
  if (ws == nullptr)
    return caf::none;
  for (const auto& [k, v] : ws->grants()) {
    std::string asked;
    if (k == "pool" && !spec.pool().empty())
      asked = spec.pool();
    else if (auto i = spec.labels().find(k); i != spec.labels().end())
      asked = i->second;
    if (!asked.empty() && asked != v)
      return caf::make_error(ec::invalid_request,
                             "workspace " + ws->name() + " is granted " + k + "="
                               + v + "; the run asks for " + k + "=" + asked);
    if (k == "pool")
      spec.set_pool(v);
    else
      (*spec.mutable_labels())[k] = v;
  }
  return caf::none;
}

caf::error cluster_config::validate() const {
  if (!store)
    return caf::make_error(ec::invalid_config, "cluster: no store");
  if (heartbeat_lapse.count() <= 0 || request_timeout.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "cluster: durations must be positive");
  if (!clock)
    return caf::make_error(ec::invalid_config, "cluster: no wall clock");
  return caf::none;
}

cluster_actor::behavior_type
cluster(cluster_actor::stateful_pointer<cluster_state> self,
        cluster_config config) {
  if (auto err = config.validate()) {
    spdlog::error("cluster: {}", render_error(err));
    self->quit(err);
    return cluster_actor::behavior_type::make_empty_behavior();
  }
  self->state.config = std::move(config);
  auto spawn_machine = [self](v1::MachineRecord record) {
    auto& st = self->state;
    machine_config cfg;
    auto name = record.name();
    auto identity = record.machine_id();
    cfg.record = std::move(record);
    cfg.heartbeat_lapse = st.config.heartbeat_lapse;
    cfg.pressure = st.config.pressure;
    cfg.store = st.config.store;
    cfg.scheduler = st.config.scheduler;
    cfg.clock = st.config.clock;
    auto handle = self->spawn<caf::linked>(machine, std::move(cfg));
    st.identities[name] = std::move(identity);
    st.machines[name] = handle;
    return handle;
  };
  // Restore every stored machine: Idle (or Maintenance) until it reports.
  size_t restored = 0;
  auto err = self->state.config.store->for_each(
    family::machines, [&](std::string_view key, std::string_view bytes) {
      v1::MachineRecord rec;
      if (!rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
          || rec.name() != key) {
        spdlog::error("cluster: stored machine record '{}' does not parse; "
                      "left in the store untouched",
                      std::string{key});
        return true;
      }
      spawn_machine(std::move(rec));
      ++restored;
      return true;
    });
  if (err)
    spdlog::error("cluster: cannot read stored machines: {}", render_error(err));
  spdlog::info("cluster: {} machine(s) restored from the store", restored);
  auto loaded = self->state.config.store->load_all<v1::Workspace>(family::workspaces);
  if (!loaded)
    spdlog::error("cluster: cannot read stored workspaces: {}",
                  render_error(loaded.error()));
  else
    for (auto& [key, ws] : *loaded)
      self->state.workspaces[key] = std::move(ws);
  err = self->state.config.store->for_each(
    family::tokens, [&](std::string_view key, std::string_view bytes) {
      if (key.substr(0, 8) != "machine/")
        return true;
      v1::MachineIdentity id;
      if (!id.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        spdlog::error("cluster: stored identity '{}' does not parse; left "
                      "untouched (that machine must enrol again)",
                      std::string{key});
      else
        self->state.keys[id.name()] = id.identity_key();
      return true;
    });
  if (err)
    spdlog::error("cluster: cannot read machine identities: {}",
                  render_error(err));

  // Asks `m` something and turns the answer into a Response for request `id`.
  auto view_response = [](uint64_t id, const v1::MachineView& view) {
    v1::Response out;
    out.set_id(id);
    *out.mutable_machine() = view;
    return out;
  };
  // An agent's enrolment; `gate` delivers its session's commands (null for
  // an embedding control plane's, which has none).
  auto enrol = [self, spawn_machine](v1::Hello& hello, uint64_t session,
                                     gate_command_actor gate) -> caf::result<machine_actor> {
      auto& st = self->state;
      const auto& name = hello.machine_name();
      if (!valid_machine_name(name))
        return caf::make_error(ec::invalid_request,
                               "machine name '" + name
                                 + "' is not a valid hostname (1-63 letters, "
                                   "digits, '-', '_', '.')");
      if (hello.machine_id().empty())
        return caf::make_error(ec::invalid_request,
                               "machine " + name + " sent no machine identity");
      machine_actor handle;
      auto now = now_ms(self);
      auto known = st.machines.find(name);
      auto mismatch = caf::make_error(
        ec::identity_mismatch,
        "machine name " + name
          + " is registered to another machine identity; give this agent "
            "another --name, or reuse the original agent's data folder");
      if (known != st.machines.end() && st.identities[name] != hello.machine_id())
        return mismatch;
      v1::JoinTokenRecord token;
      if (st.config.tokens) {
        const auto& key = hello.identity_key();
        if (key.size() != 32)
          return caf::make_error(ec::invalid_request,
                                 "machine " + name
                                   + " has no identity key from the secure "
                                     "channel");
        auto bound = st.keys.find(name);
        if (bound != st.keys.end() && bound->second != key)
          return mismatch;
        if (bound == st.keys.end()) {
          // Not enrolled yet (new, or registered before enrolment existed):
          // its join token, used up now, says it may join.
          if (hello.join_token().empty())
            return caf::make_error(
              ec::enrollment_required,
              "machine " + name
                + " is not enrolled: start its agent with --token-file (an "
                  "admin mints a join token with `astra tokens create`)");
          auto redeemed = st.config.tokens->redeem_join(hello.join_token(),
                                                         name, now);
          if (!redeemed) {
            spdlog::warn("cluster: machine {} (key {}) cannot enrol: {}", name,
                         to_hex(key).substr(0, 16),
                         render_error(redeemed.error()));
            return redeemed.error();
          }
          token = std::move(*redeemed);
          v1::MachineIdentity id;
          id.set_name(name);
          id.set_identity_key(key);
          id.set_join_token_id(token.id());
          id.set_enrolled_unix_ms(now);
          if (auto err = st.config.store->put(family::tokens,
                                              key_store_name(name), id, true))
            return err;
          st.keys[name] = key;
          spdlog::info("cluster: machine {} enrolled with join token {} (key "
                       "{})",
                       name, token.id(), to_hex(key).substr(0, 16));
        }
      }
      if (known != st.machines.end()) {
        handle = known->second;
      } else {
        v1::MachineRecord rec;
        rec.set_name(name);
        rec.set_machine_id(hello.machine_id());
        rec.set_registered_unix_ms(now);
        rec.set_agent_version(hello.software_version());
        // The labels given with its join token become the machine's.
        *rec.mutable_labels() = token.labels();
        if (auto err = st.config.store->put(family::machines, name, rec, true))
          return err;
        spdlog::info("cluster: machine {} registered (Idle until it reports)",
                     name);
        handle = spawn_machine(std::move(rec));
      }
      self->send(handle, atom::connected_v, session, true, std::move(gate));
      return handle;
    };
  return {
    [enrol](atom::enrol, v1::Hello& hello, uint64_t session) {
      return enrol(hello, session, gate_command_actor{});
    },
    [enrol](atom::enrol, v1::Hello& hello, uint64_t session,
            gate_command_actor& gate) { return enrol(hello, session, std::move(gate)); },
    [self, view_response](v1::Request& req) -> caf::result<v1::Response> {
      auto& st = self->state;
      auto id = req.id();
      auto timeout = st.config.request_timeout;
      const auto caller = req.caller();
      auto need = required_role(req);
      if (st.config.tokens && !has_role(caller, need)) {
        auto err = caller.role().empty()
                     ? caf::make_error(ec::unauthenticated,
                                       "no API token: run `astra login`, or "
                                       "set ASTRAEUS_TOKEN")
                     : caf::make_error(ec::permission_denied,
                                       caller.name() + " is a " + caller.role()
                                         + "; only "
                                         + (need == role::member
                                              ? std::string{"members"}
                                              : std::string{"owners and admins"})
                                         + " may do this");
        if (need != role::member)
          audit(self, caller, request_kind(req), "",
                "refused: " + render_error(err));
        return error_response(id, err);
      }
      auto find = [&](const std::string& name) -> caf::expected<machine_actor> {
        auto i = st.machines.find(name);
        if (i == st.machines.end())
          return caf::make_error(ec::no_such_machine,
                                 "no machine named " + name);
        return i->second;
      };
      auto machine_handles = [&] {
        std::vector<machine_actor> out;
        out.reserve(st.machines.size());
        for (auto& [name, m] : st.machines)
          out.push_back(m);
        return out;
      };
      auto warn_no_answer = [](const caf::error& err) {
        spdlog::warn("cluster: a machine did not answer: {}", render_error(err));
      };
      // Forwards one question to a machine actor, answering on `rp`; an
      // admin `action` (non-empty) is audited with its result.
      auto ask = [&](const std::string& name, const std::string& action,
                     auto... xs) -> caf::result<v1::Response> {
        auto done = [self, caller, action, name](const v1::Response& resp) {
          if (!action.empty())
            audit(self, caller, action, name, outcome(resp));
        };
        auto m = find(name);
        if (!m) {
          auto resp = error_response(id, m.error());
          done(resp);
          return resp;
        }
        auto rp = self->make_response_promise<v1::Response>();
        self->request(*m, timeout, xs...)
          .then(
            [rp, id, view_response, done](v1::MachineView& view) mutable {
              auto resp = view_response(id, view);
              done(resp);
              rp.deliver(std::move(resp));
            },
            [rp, id, done](caf::error& err) mutable {
              auto resp = error_response(id, err);
              done(resp);
              rp.deliver(std::move(resp));
            });
        return rp;
      };
      switch (req.body_case()) {
        case v1::Request::kListMachines: {
          auto rp = self->make_response_promise<v1::Response>();
          gather<v1::MachineView>(
            self, machine_handles(), timeout,
            [rp, id](std::vector<v1::MachineView> views) mutable {
              std::sort(views.begin(), views.end(),
                        [](const auto& a, const auto& b) {
                          return a.name() < b.name();
                        });
              v1::Response out;
              out.set_id(id);
              auto* list = out.mutable_machines();
              for (auto& v : views)
                *list->add_machines() = std::move(v);
              rp.deliver(std::move(out));
            },
            warn_no_answer, atom::get_v);
          return rp;
        }
        case v1::Request::kListGpus: {
          std::vector<machine_actor> targets;
          const auto& only = req.list_gpus().machine();
          if (only.empty()) {
            targets = machine_handles();
          } else {
            auto m = find(only);
            if (!m)
              return error_response(id, m.error());
            targets.push_back(*m);
          }
          auto rp = self->make_response_promise<v1::Response>();
          gather<std::vector<v1::GpuView>>(
            self, targets, timeout,
            [rp, id](std::vector<std::vector<v1::GpuView>> per_machine) mutable {
              std::vector<v1::GpuView> all;
              for (auto& views : per_machine)
                for (auto& v : views)
                  all.push_back(std::move(v));
              std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
                return std::tie(a.machine(), a.gpu().pci_address(), a.gpu().id())
                       < std::tie(b.machine(), b.gpu().pci_address(), b.gpu().id());
              });
              v1::Response out;
              out.set_id(id);
              auto* list = out.mutable_gpus();
              for (auto& v : all)
                *list->add_gpus() = std::move(v);
              rp.deliver(std::move(out));
            },
            warn_no_answer, atom::gpus_v);
          return rp;
        }
        case v1::Request::kGetMachine:
          return ask(req.get_machine().name(), "", atom::get_v);
        case v1::Request::kSetCordon:
          return ask(req.set_cordon().name(),
                     req.set_cordon().cordoned() ? "cordon" : "uncordon",
                     atom::cordon_v, req.set_cordon().cordoned());
        case v1::Request::kSetLabels:
          return ask(req.set_labels().name(), "label", req.set_labels());
        case v1::Request::kSetMaintenance:
          return ask(req.set_maintenance().name(),
                     req.set_maintenance().maintenance() ? "maintenance on"
                                                         : "maintenance off",
                     atom::maintenance_v, req.set_maintenance().maintenance());
        case v1::Request::kClearFault: {
          const auto& cf = req.clear_fault();
          auto m = find(cf.machine());
          auto target = cf.machine() + "/" + cf.gpu();
          auto audit = [self, caller, target](const std::string& result) {
            astraeus::audit(self, caller, "clear-fault", target, result);
          };
          if (!m) {
            audit("refused: " + render_error(m.error()));
            return error_response(id, m.error());
          }
          if (cf.gpu().empty())
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "name the GPU to clear"));
          auto rp = self->make_response_promise<v1::Response>();
          self->request(*m, timeout, atom::clear_v, cf.gpu())
            .then(
              [rp, id, audit](v1::ClearFaultResult& result) mutable {
                audit(result.cleared() ? "cleared" : "nothing latched");
                v1::Response out;
                out.set_id(id);
                *out.mutable_cleared() = std::move(result);
                rp.deliver(std::move(out));
              },
              [rp, id, audit](caf::error& err) mutable {
                audit("failed: " + render_error(err));
                rp.deliver(error_response(id, err));
              });
          return rp;
        }
        case v1::Request::kXidPolicy: {
          v1::Response out;
          out.set_id(id);
          *out.mutable_xids() = st.config.xid_policy;
          return out;
        }
        case v1::Request::kCreateWorkspace: {
          auto ws = req.create_workspace().workspace();
          // An admin action: audited with its result.
          auto fail = [&](const caf::error& err) {
            audit(self, caller, "create workspace", ws.name(),
                  "failed: " + render_error(err));
            return error_response(id, err);
          };
          if (auto err = validate_workspace(ws))
            return fail(err);
          if (ws.name() == default_workspace)
            return fail(caf::make_error(ec::invalid_request,
                                        "workspace default exists already and is "
                                        "granted every machine; create a workspace "
                                        "with another name for a pool"));
          if (st.workspaces.count(ws.name()))
            return fail(caf::make_error(ec::invalid_request,
                                        "a workspace named " + ws.name()
                                          + " already exists"));
          char ns[16];
          std::snprintf(ns, sizeof(ns), "ws-%06x",
                        static_cast<unsigned>(std::random_device{}() & 0xffffffu));
          ws.set_namespace_(ns);
          ws.set_created_unix_ms(now_ms(self));
          if (auto err = st.config.store->put(family::workspaces, ws.name(), ws, true))
            return fail(err);
          audit(self, caller, "create workspace", ws.name(), "ok");
          st.workspaces[ws.name()] = ws;
          spdlog::info("cluster: workspace {} created (organisation {}, {} grant(s))",
                       ws.name(), ws.organisation(), ws.grants_size());
          v1::Response out;
          out.set_id(id);
          *out.mutable_workspace() = std::move(ws);
          return out;
        }
        case v1::Request::kListWorkspaces: {
          v1::Response out;
          out.set_id(id);
          auto* list = out.mutable_workspaces();
          if (!st.workspaces.count(default_workspace)) {
            auto* d = list->add_workspaces();
            d->set_name(default_workspace);
            d->set_organisation("default");
          }
          for (const auto& [name, ws] : st.workspaces)
            *list->add_workspaces() = ws;
          return out;
        }
        case v1::Request::kSubmitRun:
        case v1::Request::kListRuns:
        case v1::Request::kGetRun:
        case v1::Request::kDeleteRun: {
          if (!st.config.scheduler)
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "this controller runs no "
                                                      "scheduler"));
          // The workspace is resolved before any promise is made.
          v1::RunSpec spec;
          if (req.has_submit_run()) {
              spec = req.submit_run().spec();
              auto wname = spec.workspace().empty() ? std::string{default_workspace}
                                                    : spec.workspace();
              auto w = st.workspaces.find(wname);
              if (w == st.workspaces.end() && wname != default_workspace)
                return error_response(
                  id, caf::make_error(ec::invalid_request,
                                      "no workspace named " + wname
                                        + "; create it with: astra workspace create "
                                        + wname + " --grant pool=NAME"));
              if (auto err = apply_workspace(w == st.workspaces.end() ? nullptr
                                                                      : &w->second,
                                             spec))
                return error_response(id, err);
          }
          auto rp = self->make_response_promise<v1::Response>();
          auto on_run = [rp, id](v1::Run& run) mutable {
            v1::Response out;
            out.set_id(id);
            *out.mutable_run() = std::move(run);
            rp.deliver(std::move(out));
          };
          auto on_error = [rp, id](caf::error& err) mutable {
            rp.deliver(error_response(id, err));
          };
          auto& sched = st.config.scheduler;
          if (req.has_submit_run()) {
            // The run is its submitter's, whatever the spec says.
            spec.set_owner(caller.name());
            self->request(sched, timeout, atom::submit_v, std::move(spec))
              .then(on_run, on_error);
          } else if (req.has_get_run()) {
            self->request(sched, timeout, atom::get_v, req.get_run().name())
              .then(on_run, on_error);
          } else if (req.has_delete_run() && st.config.tokens
                     && !has_role(caller, role::admin)) {
            // Members stop only their own runs.
            auto name = req.delete_run().name();
            self->request(sched, timeout, atom::get_v, name)
              .then(
                [self, sched, timeout, name, caller, on_run, on_error,
                 rp, id](v1::Run& run) mutable {
                  if (run.spec().owner() != caller.name()) {
                    rp.deliver(error_response(
                      id, caf::make_error(ec::permission_denied,
                                          "run " + name + " is "
                                            + (run.spec().owner().empty()
                                                 ? std::string{"nobody's"}
                                                 : run.spec().owner() + "'s")
                                            + "; a member stops only their own "
                                              "runs")));
                    return;
                  }
                  self->request(sched, timeout, atom::remove_v, name)
                    .then(on_run, on_error);
                },
                on_error);
          } else if (req.has_delete_run()) {
            self->request(sched, timeout, atom::remove_v, req.delete_run().name())
              .then(on_run, on_error);
          } else {
            self->request(sched, timeout, atom::runs_v)
              .then(
                [rp, id](v1::RunList& runs) mutable {
                  v1::Response out;
                  out.set_id(id);
                  *out.mutable_runs() = std::move(runs);
                  rp.deliver(std::move(out));
                },
                on_error);
          }
          return rp;
        }
        case v1::Request::kCreateJoinToken: {
          const auto& body = req.create_join_token();
          std::map<std::string, std::string> labels(body.labels().begin(),
                                                    body.labels().end());
          std::string what;
          for (const auto& [k, v] : labels)
            what += (what.empty() ? "" : ",") + k + "=" + v;
          if (!st.config.tokens) {
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "this controller keeps "
                                                      "no tokens"));
          }
          auto minted = st.config.tokens->mint_join(labels, body.ttl_seconds(),
                                                    caller.name(), now_ms(self));
          if (!minted) {
            audit(self, caller, "create join token", what,
                  "failed: " + render_error(minted.error()));
            return error_response(id, minted.error());
          }
          audit(self, caller, "create join token", what,
                "ok: token " + minted->second.id());
          v1::Response out;
          out.set_id(id);
          auto* t = out.mutable_join_token();
          t->set_token(std::move(minted->first));
          t->set_id(minted->second.id());
          t->set_expires_unix_ms(minted->second.expires_unix_ms());
          *t->mutable_labels() = minted->second.labels();
          t->set_controller_key(st.config.controller_key);
          t->set_controller_address(st.config.advertise_address);
          return out;
        }
        case v1::Request::kCreateApiToken: {
          const auto& body = req.create_api_token();
          auto r = parse_role(body.role().empty() ? "member" : body.role());
          auto target = body.name() + " (" + body.role() + ")";
          caf::error err;
          if (!st.config.tokens)
            err = caf::make_error(ec::invalid_request,
                                  "this controller keeps no tokens");
          else if (!r)
            err = caf::make_error(ec::invalid_request,
                                  "role '" + body.role()
                                    + "': use owner, admin or member");
          else if (*r == role::owner && !has_role(caller, role::owner))
            err = caf::make_error(ec::permission_denied,
                                  "only an owner may create an owner token");
          if (err) {
            audit(self, caller, "create API token", target,
                  "refused: " + render_error(err));
            return error_response(id, err);
          }
          auto minted = st.config.tokens->mint_api(body.name(), *r,
                                                   body.ttl_seconds(),
                                                   caller.name(), now_ms(self));
          if (!minted) {
            audit(self, caller, "create API token", target,
                  "failed: " + render_error(minted.error()));
            return error_response(id, minted.error());
          }
          audit(self, caller, "create API token", target,
                "ok: token " + minted->second.id());
          v1::Response out;
          out.set_id(id);
          auto* t = out.mutable_api_token();
          t->set_token(std::move(minted->first));
          t->set_id(minted->second.id());
          t->set_name(minted->second.name());
          t->set_role(minted->second.role());
          t->set_expires_unix_ms(minted->second.expires_unix_ms());
          return out;
        }
        case v1::Request::kRevokeApiToken: {
          const auto& tid = req.revoke_api_token().id();
          if (!st.config.tokens)
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "this controller keeps "
                                                      "no tokens"));
          auto revoked = st.config.tokens->revoke_api(tid);
          if (!revoked) {
            audit(self, caller, "revoke API token", tid,
                  "failed: " + render_error(revoked.error()));
            return error_response(id, revoked.error());
          }
          audit(self, caller, "revoke API token", tid, "ok");
          v1::Response out;
          out.set_id(id);
          auto* t = out.mutable_api_token();
          t->set_id(revoked->id());
          t->set_name(revoked->name());
          t->set_role(revoked->role());
          t->set_expires_unix_ms(revoked->expires_unix_ms());
          return out;
        }
        case v1::Request::kWhoami: {
          v1::Response out;
          out.set_id(id);
          *out.mutable_principal() = caller;
          return out;
        }
        case v1::Request::kListAudit: {
          auto limit = req.list_audit().limit() == 0 ? 100u
                                                     : req.list_audit().limit();
          std::vector<v1::AuditRecord> all;
          auto err = st.config.store->for_each(
            family::audit, [&](std::string_view, std::string_view bytes) {
              v1::AuditRecord rec;
              if (rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
                all.push_back(std::move(rec));
              return true;
            });
          if (err)
            return error_response(id, err);
          v1::Response out;
          out.set_id(id);
          auto* list = out.mutable_audit();
          for (auto i = all.rbegin(); i != all.rend() && limit > 0; ++i, --limit)
            *list->add_records() = std::move(*i);
          return out;
        }
        case v1::Request::kGetLogs: {
          // The run says where the worker is; its machine's agent keeps
          // the log.
          if (!st.config.scheduler)
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "this controller runs no "
                                                      "scheduler"));
          auto q = req.get_logs();
          auto rp = self->make_response_promise<v1::Response>();
          self->request(st.config.scheduler, timeout, atom::get_v, q.run())
            .then(
              [self, rp, id, q, timeout](v1::Run& run) mutable {
                auto rank = q.worker() < 0 ? 0u : static_cast<uint32_t>(q.worker());
                const v1::WorkerAssignment* w = nullptr;
                for (const auto& x : run.workers())
                  if (x.rank() == rank && (!w || x.array_index() < w->array_index()))
                    w = &x;
                if (!w) {
                  rp.deliver(error_response(
                    id, caf::make_error(ec::invalid_request,
                                        "run " + q.run() + " has no worker "
                                          + std::to_string(rank)
                                          + (run.workers_size() == 0
                                               ? " (it is " + run.state()
                                                   + ": not placed yet)"
                                               : ""))));
                  return;
                }
                auto m = self->state.machines.find(w->machine());
                if (m == self->state.machines.end()) {
                  rp.deliver(error_response(
                    id, caf::make_error(ec::no_such_machine,
                                        "no machine named " + w->machine())));
                  return;
                }
                v1::LogsCommand cmd;
                cmd.set_worker(w->name());
                cmd.set_offset(q.offset());
                cmd.set_max_bytes(q.max_bytes());
                self->request(m->second, timeout, atom::logs_v, std::move(cmd))
                  .then(
                    [rp, id](v1::LogChunk& chunk) mutable {
                      v1::Response out;
                      out.set_id(id);
                      *out.mutable_logs() = std::move(chunk);
                      rp.deliver(std::move(out));
                    },
                    [rp, id](caf::error& err) mutable {
                      rp.deliver(error_response(id, err));
                    });
              },
              [rp, id](caf::error& err) mutable {
                rp.deliver(error_response(id, err));
              });
          return rp;
        }
        case v1::Request::BODY_NOT_SET:
          break;
      }
      return error_response(id, caf::make_error(ec::invalid_request,
                                                "request carries no known body "
                                                "(is astra newer than the "
                                                "controller?)"));
    },
    [self](atom::get, const std::string& name) -> caf::result<machine_actor> {
      auto& st = self->state;
      auto i = st.machines.find(name);
      if (i == st.machines.end())
        return caf::make_error(ec::no_such_machine, "no machine named " + name);
      return i->second;
    },
    [self](atom::login, const std::string& token) -> caf::result<v1::Principal> {
      auto& st = self->state;
      if (!st.config.tokens)
        return v1::Principal{};
      auto who = st.config.tokens->authenticate(token, now_ms(self));
      if (!who) {
        spdlog::warn("cluster: a CLI session was refused: {}",
                     render_error(who.error()));
        return who.error();
      }
      return std::move(*who);
    },
  };
}

} // namespace astraeus
