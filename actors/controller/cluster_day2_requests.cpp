// The cluster's day-two requests (issue 13, item 6): remove and drain a
// machine, list and revoke join tokens, list API tokens, delete a
// workspace.

#include "actors/controller/cluster_day2_requests.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <caf/exit_reason.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/run_state.hpp"
#include "messages/worker_state.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

namespace astraeus::day2 {

namespace {

using promise_t = caf::typed_response_promise<v1::Response>;

caf::error no_tokens() {
  return caf::make_error(ec::invalid_request, "this controller keeps no tokens");
}

/// The second half of a removal: the machine is Down or drained and the
/// scheduler forgot it; its record and identity go, its actor stops.
v1::Response finish_removal(cluster_ptr self, const cluster_request& r, const std::string& name,
                            v1::MachineView view) {
  auto& st = self->state;
  std::vector<Store::change> batch{{family::machines, name, std::nullopt},
                                   {family::tokens, machine_identity_key(name), std::nullopt}};
  if (auto err = st.config.store->write(batch, true)) {
    r.audit(name, "failed: " + render_error(err));
    return r.error(err);
  }
  if (auto m = st.machines.find(name); m != st.machines.end()) {
    self->unlink_from(m->second);
    // The gate refuses its agent's session on this reason (actors/controller/gate.cpp).
    self->send_exit(m->second, caf::make_error(ec::enrollment_required,
                                               "machine " + name + " was removed"));
    st.machines.erase(m);
  }
  st.identities.erase(name);
  st.keys.erase(name);
  if (st.config.history)
    self->send(st.config.history, atom::remove_v, name);
  spdlog::info("cluster: machine {} removed (record, identity and GPUs)", name);
  r.audit(name, "ok");
  auto out = r.response();
  *out.mutable_machine() = std::move(view);
  return out;
}

/// " (long-0 of run long is Stopping)": the workers on `machine` that have
/// not ended, as the scheduler's runs list them (five at most); "" when none.
std::string live_workers_text(const v1::RunList& runs, const std::string& machine) {
  std::string out;
  size_t n = 0;
  for (const auto& run : runs.runs())
    for (const auto& w : run.workers())
      if (w.machine() == machine && !worker_ended(state_of(w)) && n++ < 5)
        out += (out.empty() ? "" : ", ") + w.name() + " of run " + run.spec().name() + " is "
               + to_string(state_of(w));
  if (n > 5)
    out += " and " + std::to_string(n - 5) + " more";
  return out.empty() ? out : " (" + out + ")";
}

} // namespace

caf::result<v1::Response> remove_machine(const cluster_request& r) {
  auto& st = r.self->state;
  const auto name = r.req.remove_machine().name();
  auto m = st.machines.find(name);
  if (m == st.machines.end()) {
    auto err = caf::make_error(ec::no_such_machine, "no machine named " + name);
    r.audit(name, "failed: " + render_error(err));
    return r.error(err);
  }
  auto rp = r.self->make_response_promise<v1::Response>();
  // The cluster_request refers to the request, which lives as long as the
  // handler: keep copies for the answers that come later.
  auto req = std::make_shared<v1::Request>(r.req);
  auto self = r.self;
  auto row = &r.row;
  auto timeout = r.timeout;
  auto later = [self, req, row, timeout]() {
    return cluster_request{self, *req, *row, req->id(), timeout};
  };
  auto fail = [rp, later](const std::string& name, const caf::error& err) mutable {
    auto cr = later();
    cr.audit(name, "refused: " + render_error(err));
    rp.deliver(cr.error(err));
  };
  self->request(m->second, timeout, atom::get_v)
    .then(
      [self, rp, name, later, timeout](v1::MachineView& view) mutable {
        auto cr = later();
        bool down = view.state() == v1::Machine::Down;
        auto sched = self->state.config.scheduler;
        if (!down && !view.drained()) {
          auto refuse = [rp, later, name, view](const std::string& workers) mutable {
            // The request is right, the machine's state is not (409, as
            // the other refusals for a state).
            auto err = caf::make_error(
              ec::failed_precondition,
              "machine " + name + " is " + v1::Machine::State_Name(view.state())
                + (view.drain_deadline_unix_ms() != 0
                     ? " and still draining" + workers
                         + ": it can be removed once its agent reports "
                         + (workers.empty() ? "its workers" : "them")
                         + " ended (astra machine " + name + " then says drained)"
                     : ": only a Down machine or a drained one is removed (astra drain "
                         + name + " first)"));
            auto cr = later();
            cr.audit(name, "refused: " + render_error(err));
            rp.deliver(cr.error(err));
          };
          if (!sched || view.drain_deadline_unix_ms() == 0) {
            refuse("");
            return;
          }
          // Draining: the refusal names the workers it waits for.
          self->request(sched, timeout, atom::runs_v)
            .then([refuse, name](v1::RunList& runs) mutable {
                    refuse(live_workers_text(runs, name));
                  },
                  [refuse](caf::error&) mutable { refuse(""); });
          return;
        }
        if (!sched) {
          rp.deliver(finish_removal(self, cr, name, std::move(view)));
          return;
        }
        v1::RemoveMachine forget;
        forget.set_name(name);
        self->request(sched, timeout, std::move(forget))
          .then(
            [self, rp, name, later, view](bool) mutable {
              rp.deliver(finish_removal(self, later(), name, std::move(view)));
            },
            [rp, name, later](caf::error& err) mutable {
              auto cr = later();
              cr.audit(name, "refused: " + render_error(err));
              rp.deliver(cr.error(err));
            });
      },
      [fail, name](caf::error& err) mutable { fail(name, err); });
  return rp;
}

caf::result<v1::Response> drain_machine(const cluster_request& r) {
  auto& st = r.self->state;
  const auto& body = r.req.drain_machine();
  const auto name = body.name();
  if (auto err = check_seconds_bound(body.deadline_seconds(), "deadline_seconds",
                                     max_drain_deadline_seconds)) {
    r.audit(name, "refused: " + render_error(err));
    return r.error(err);
  }
  auto m = st.machines.find(name);
  if (m == st.machines.end()) {
    auto err = caf::make_error(ec::no_such_machine, "no machine named " + name);
    r.audit(name, "failed: " + render_error(err));
    return r.error(err);
  }
  auto rp = r.self->make_response_promise<v1::Response>();
  auto self = r.self;
  auto caller = r.caller();
  auto id = r.id;
  auto what = name + " (deadline " + std::to_string(body.deadline_seconds()) + " s)";
  self->request(m->second, r.timeout, body)
    .then(
      [self, rp, id, caller, what](v1::MachineView& view) mutable {
        audit(self, caller, "drain", what, "ok");
        v1::Response out;
        out.set_id(id);
        *out.mutable_machine() = std::move(view);
        rp.deliver(std::move(out));
      },
      [self, rp, id, caller, what](caf::error& err) mutable {
        audit(self, caller, "drain", what, "failed: " + render_error(err));
        rp.deliver(error_response(id, err));
      });
  return rp;
}

caf::result<v1::Response> set_data_location(const cluster_request& r) {
  auto& st = r.self->state;
  const auto& body = r.req.set_data_location();
  const auto name = body.name();
  auto what = name + " " + body.path();
  auto m = st.machines.find(name);
  if (m == st.machines.end()) {
    auto err = caf::make_error(ec::no_such_machine, "no machine named " + name);
    r.audit(what, "failed: " + render_error(err));
    return r.error(err);
  }
  auto rp = r.self->make_response_promise<v1::Response>();
  auto self = r.self;
  auto caller = r.caller();
  auto id = r.id;
  self->request(m->second, r.timeout, r.req)
    .then(
      [self, rp, id, caller, what](v1::MachineView& view) mutable {
        audit(self, caller, "set data location", what, "ok");
        v1::Response out;
        out.set_id(id);
        *out.mutable_machine() = std::move(view);
        rp.deliver(std::move(out));
      },
      [self, rp, id, caller, what](caf::error& err) mutable {
        audit(self, caller, "set data location", what, "failed: " + render_error(err));
        rp.deliver(error_response(id, err));
      });
  return rp;
}

caf::result<v1::Response> list_join_tokens(const cluster_request& r) {
  const auto& tokens = r.self->state.config.tokens;
  if (!tokens)
    return r.error(no_tokens());
  auto all = tokens->list_join();
  if (!all)
    return r.error(all.error());
  auto out = r.response();
  for (auto& t : *all)
    *out.mutable_join_tokens()->add_tokens() = std::move(t);
  out.mutable_join_tokens();
  return out;
}

caf::result<v1::Response> revoke_join_token(const cluster_request& r) {
  const auto& tokens = r.self->state.config.tokens;
  const auto& tid = r.req.revoke_join_token().id();
  if (!tokens)
    return r.error(no_tokens());
  auto revoked = tokens->revoke_join(tid);
  if (!revoked) {
    r.audit(tid, "failed: " + render_error(revoked.error()));
    return r.error(revoked.error());
  }
  r.audit(tid, "ok");
  auto out = r.response();
  *out.mutable_join_tokens()->add_tokens() = std::move(*revoked);
  return out;
}

caf::result<v1::Response> list_api_tokens(const cluster_request& r) {
  const auto& tokens = r.self->state.config.tokens;
  if (!tokens)
    return r.error(no_tokens());
  auto all = tokens->list_api();
  if (!all)
    return r.error(all.error());
  auto out = r.response();
  out.mutable_api_tokens();
  for (auto& t : *all)
    *out.mutable_api_tokens()->add_tokens() = std::move(t);
  return out;
}

caf::result<v1::Response> delete_workspace(const cluster_request& r) {
  auto& st = r.self->state;
  const auto name = r.req.delete_workspace().name();
  auto refuse = [&](const caf::error& err) {
    r.audit(name, "refused: " + render_error(err));
    return r.error(err);
  };
  if (name == default_workspace)
    return refuse(caf::make_error(ec::invalid_request,
                                  "workspace default cannot be deleted: runs without a "
                                  "workspace go there"));
  if (!st.workspaces.count(name))
    return refuse(caf::make_error(ec::invalid_request, "no workspace named " + name));
  auto self = r.self;
  auto erase = [self, name, caller = r.caller(), id = r.id]() -> v1::Response {
    auto& st = self->state;
    if (auto err = st.config.store->erase(family::workspaces, name, true)) {
      audit(self, caller, "delete workspace", name, "failed: " + render_error(err));
      return error_response(id, err);
    }
    v1::Response out;
    out.set_id(id);
    *out.mutable_workspace() = st.workspaces[name];
    st.workspaces.erase(name);
    audit(self, caller, "delete workspace", name, "ok");
    spdlog::info("cluster: workspace {} deleted", name);
    return out;
  };
  if (!st.config.scheduler)
    return erase();
  auto rp = r.self->make_response_promise<v1::Response>();
  self->request(st.config.scheduler, r.timeout, atom::runs_v)
    .then(
      [self, rp, name, erase, caller = r.caller(), id = r.id](v1::RunList& runs) mutable {
        std::string live;
        size_t n = 0;
        for (const auto& run : runs.runs())
          if (run.spec().workspace() == name && !has_ended(state_of(run)) && n++ < 5)
            live += (live.empty() ? "" : ", ") + run.spec().name();
        if (n > 0) {
          auto err = caf::make_error(ec::invalid_request,
                                     "workspace " + name + " still has " +
                                       (n == 1 ? "a run: " : std::to_string(n) + " runs: ") +
                                       live + "; delete them first (astra delete RUN)");
          audit(self, caller, "delete workspace", name, "refused: " + render_error(err));
          rp.deliver(error_response(id, err));
          return;
        }
        // Its ended runs go with it: a new workspace of that name starts
        // without them (a new-user trial saw it inherit them, and a new run
        // named as an old one refused: "already exists").
        self->request(self->state.config.scheduler, std::chrono::seconds{10}, atom::expire_v,
                      name)
          .then(
            [rp, erase, name](uint64_t forgotten) mutable {
              if (forgotten > 0)
                spdlog::info("cluster: workspace {}'s {} ended run(s) forgotten", name,
                             forgotten);
              rp.deliver(erase());
            },
            [rp, erase](caf::error&) mutable { rp.deliver(erase()); });
      },
      [rp, id = r.id](caf::error& err) mutable { rp.deliver(error_response(id, err)); });
  return rp;
}

caf::result<v1::Response> set_workspace_grants(const cluster_request& r) {
  auto& st = r.self->state;
  const auto& req = r.req.set_workspace_grants();
  const auto name = req.name();
  auto refuse = [&](const caf::error& err) {
    r.audit(name, "refused: " + render_error(err));
    return r.error(err);
  };
  if (name == default_workspace)
    return refuse(caf::make_error(ec::invalid_request,
                                  "workspace default is the cluster's own: its runs may bind "
                                  "any machine path and do privileged work already"));
  auto w = st.workspaces.find(name);
  if (w == st.workspaces.end())
    return refuse(caf::make_error(ec::invalid_request, "no workspace named " + name));
  if (req.add_bind_paths().empty() && req.remove_bind_paths().empty()
      && !req.has_allow_privileged())
    return refuse(caf::make_error(ec::invalid_request,
                                  "nothing to grant: give --path PATH, --remove-path PATH, "
                                  "--privileged or --no-privileged"));
  v1::Workspace ws = w->second;
  std::vector<std::string> paths(ws.bind_grants().begin(), ws.bind_grants().end());
  std::string changed;
  for (const auto& p : req.add_bind_paths()) {
    auto normal = normal_grant_path(p);
    if (normal.empty())
      return refuse(caf::make_error(ec::invalid_request,
                                    "--path '" + p + "': give an absolute machine path "
                                    "without '..', other than / (e.g. /data/imagenet)"));
    if (std::find(paths.begin(), paths.end(), normal) == paths.end()) {
      paths.push_back(normal);
      changed += (changed.empty() ? "" : ", ") + ("+" + normal);
    }
  }
  for (const auto& p : req.remove_bind_paths()) {
    auto normal = normal_grant_path(p);
    auto i = std::find(paths.begin(), paths.end(), normal.empty() ? p : normal);
    if (i == paths.end())
      return refuse(caf::make_error(ec::invalid_request,
                                    "--remove-path '" + p + "': workspace " + name
                                      + " is not granted it"));
    changed += (changed.empty() ? "" : ", ") + ("-" + *i);
    paths.erase(i);
  }
  std::sort(paths.begin(), paths.end());
  ws.clear_bind_grants();
  for (const auto& p : paths)
    ws.add_bind_grants(p);
  if (req.has_allow_privileged() && req.allow_privileged() != ws.allow_privileged()) {
    ws.set_allow_privileged(req.allow_privileged());
    changed += std::string{changed.empty() ? "" : ", "}
               + (req.allow_privileged() ? "privileged" : "no privileged");
  }
  if (auto err = st.config.store->put(family::workspaces, name, ws, true)) {
    r.audit(name, "failed: " + render_error(err));
    return r.error(err);
  }
  w->second = ws;
  r.audit(name, changed.empty() ? std::string{"ok (no change)"} : "ok: " + changed);
  spdlog::info("cluster: workspace {} grants {}", name, changed.empty() ? "unchanged" : changed);
  auto out = r.response();
  *out.mutable_workspace() = std::move(ws);
  return out;
}

caf::result<v1::Response> get_gpu_history(const cluster_request& r) {
  auto& st = r.self->state;
  const auto& q = r.req.get_gpu_history();
  if (!st.config.history)
    return r.error(caf::make_error(ec::invalid_request,
                                   "this controller keeps no GPU history"));
  if (q.gpu().empty())
    return r.error(caf::make_error(ec::invalid_request,
                                   "gpu: name the GPU (its UUID, index or PCI address)"));
  if (st.machines.count(q.machine()) == 0)
    return r.error(caf::make_error(ec::no_such_machine, "no machine named " + q.machine()));
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(st.config.history, r.timeout, r.req)
    .then([rp](v1::Response& resp) mutable { rp.deliver(std::move(resp)); },
          [rp, id = r.id](caf::error& err) mutable { rp.deliver(error_response(id, err)); });
  return rp;
}

} // namespace astraeus::day2
