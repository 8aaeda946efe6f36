#include "actors/cluster_actor.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <tuple>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/gather.hpp"
#include "actors/machine_actor.hpp"
#include "messages/error.hpp"
#include "runtime/wall_clock.hpp"
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

} // namespace

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

  // Asks `m` something and turns the answer into a Response for request `id`.
  auto view_response = [](uint64_t id, const v1::MachineView& view) {
    v1::Response out;
    out.set_id(id);
    *out.mutable_machine() = view;
    return out;
  };
  return {
    [self, spawn_machine](atom::enrol, v1::Hello& hello,
                          uint64_t session) -> caf::result<machine_actor> {
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
      if (auto i = st.machines.find(name); i != st.machines.end()) {
        if (st.identities[name] != hello.machine_id())
          return caf::make_error(
            ec::identity_mismatch,
            "machine name " + name
              + " is registered to another machine identity; give this agent "
                "another --name, or reuse the original agent's data folder");
        handle = i->second;
      } else {
        v1::MachineRecord rec;
        rec.set_name(name);
        rec.set_machine_id(hello.machine_id());
        rec.set_registered_unix_ms(unix_ms_now());
        rec.set_agent_version(hello.software_version());
        if (auto err = st.config.store->put(family::machines, name, rec, true))
          return err;
        spdlog::info("cluster: machine {} registered (Idle until it reports)",
                     name);
        handle = spawn_machine(std::move(rec));
      }
      self->send(handle, atom::connected_v, session, true,
                 caf::actor_cast<caf::actor>(self->current_sender()));
      return handle;
    },
    [self, view_response](v1::Request& req) -> caf::result<v1::Response> {
      auto& st = self->state;
      auto id = req.id();
      auto timeout = st.config.request_timeout;
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
      // Forwards one question to a machine actor, answering on `rp`.
      auto ask = [&](const std::string& name, auto... xs)
        -> caf::result<v1::Response> {
        auto m = find(name);
        if (!m)
          return error_response(id, m.error());
        auto rp = self->make_response_promise<v1::Response>();
        self->request(*m, timeout, xs...)
          .then(
            [rp, id, view_response](v1::MachineView& view) mutable {
              rp.deliver(view_response(id, view));
            },
            [rp, id](caf::error& err) mutable {
              rp.deliver(error_response(id, err));
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
          return ask(req.get_machine().name(), atom::get_v);
        case v1::Request::kSetCordon:
          return ask(req.set_cordon().name(), atom::cordon_v,
                     req.set_cordon().cordoned());
        case v1::Request::kSetLabels:
          return ask(req.set_labels().name(), req.set_labels());
        case v1::Request::kSetMaintenance:
          return ask(req.set_maintenance().name(), atom::maintenance_v,
                     req.set_maintenance().maintenance());
        case v1::Request::kClearFault: {
          const auto& cf = req.clear_fault();
          auto m = find(cf.machine());
          auto target = cf.machine() + "/" + cf.gpu();
          auto audit = [self, target](const std::string& result) {
            v1::AuditRecord rec;
            rec.set_unix_ms(unix_ms_now());
            rec.set_who("cli");
            rec.set_action("clear-fault");
            rec.set_target(target);
            rec.set_result(result);
            char key[64];
            std::snprintf(key, sizeof(key), "%020lld-%08llu",
                          static_cast<long long>(rec.unix_ms()),
                          static_cast<unsigned long long>(++self->state.audit_seq));
            if (auto err = self->state.config.store->put(family::audit, key, rec, true))
              spdlog::error("cluster: cannot store an audit record: {}",
                            render_error(err));
            spdlog::info("cluster: audit: {} clear-fault {}: {}", rec.who(), target,
                         result);
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
          if (auto err = validate_workspace(ws))
            return error_response(id, err);
          if (ws.name() == default_workspace)
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "workspace default exists already "
                                                      "and is granted every machine; "
                                                      "create a workspace with another "
                                                      "name for a pool"));
          if (st.workspaces.count(ws.name()))
            return error_response(id, caf::make_error(ec::invalid_request,
                                                      "a workspace named " + ws.name()
                                                        + " already exists"));
          char ns[16];
          std::snprintf(ns, sizeof(ns), "ws-%06x",
                        static_cast<unsigned>(std::random_device{}() & 0xffffffu));
          ws.set_namespace_(ns);
          ws.set_created_unix_ms(unix_ms_now());
          if (auto err = st.config.store->put(family::workspaces, ws.name(), ws, true))
            return error_response(id, err);
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
            self->request(sched, timeout, atom::submit_v, std::move(spec))
              .then(on_run, on_error);
          }
          else if (req.has_get_run())
            self->request(sched, timeout, atom::get_v, req.get_run().name())
              .then(on_run, on_error);
          else if (req.has_delete_run())
            self->request(sched, timeout, atom::remove_v, req.delete_run().name())
              .then(on_run, on_error);
          else
            self->request(sched, timeout, atom::runs_v)
              .then(
                [rp, id](v1::RunList& runs) mutable {
                  v1::Response out;
                  out.set_id(id);
                  *out.mutable_runs() = std::move(runs);
                  rp.deliver(std::move(out));
                },
                on_error);
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
  };
}

} // namespace astraeus
