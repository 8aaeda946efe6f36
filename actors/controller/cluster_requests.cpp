#include "actors/controller/cluster_requests.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/cluster_day2_requests.hpp"
#include "actors/gather.hpp"
#include "actors/controller/machine_actor.hpp"
#include "actors/validation/topology_findings.hpp"
#include "messages/error.hpp"
#include "messages/labels.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

namespace astraeus {

void for_display(v1::Run& run, bool in_list) {
  run.mutable_spec()->clear_code_tgz();
  if (in_list)
    for (auto& c : *run.mutable_spec()->mutable_configs())
      for (auto& m : *c.mutable_mounts())
        m.clear_content();
  // The seed's name for a worker's GPUs (issue 22), filled here only: the
  // scheduler keeps and stores them once, as gpu_ids (issue 14).
  for (auto& w : *run.mutable_workers())
    *w.mutable_assigned_gpu_ids() = w.gpu_ids();
}

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

void audit(cluster_ptr self, const v1::Principal& who, const std::string& action,
           const std::string& target, const std::string& result) {
  v1::AuditRecord rec;
  // What a caller sent (a machine name in a refused request's path) is kept
  // as one line (a target of at most 256 bytes, a result of 1,024): no
  // newline or terminal escape reaches whoever reads the log.
  rec.set_unix_ms(self->state.config.clock->now_unix_ms());
  rec.set_who(who.name().empty() ? std::string{"cli"}
                                 : who.name() + " (" + who.role() + ", token "
                                     + who.token_id() + ")");
  rec.set_action(action);
  rec.set_target(one_line_text(target, 256));
  rec.set_result(one_line_text(result, 1024));
  char key[64];
  std::snprintf(key, sizeof(key), "%020lld-%08llu",
                static_cast<long long>(rec.unix_ms()),
                static_cast<unsigned long long>(++self->state.audit_seq));
  if (auto err = self->state.config.store->put(family::audit, key, rec, true))
    spdlog::error("cluster: cannot store an audit record: {}", render_error(err));
  spdlog::info("cluster: audit: {} {} {}: {}", rec.who(), action, target, result);
}

std::string cluster_request::action() const {
  return row.audit_name != nullptr ? std::string{row.audit_name(req)} : std::string{};
}

void cluster_request::audit(const std::string& target,
                            const std::string& result) const {
  astraeus::audit(self, caller(), action(), target, result);
}

v1::Response cluster_request::error(const caf::error& err) const {
  return error_response(id, err);
}

v1::Response cluster_request::response() const {
  v1::Response out;
  out.set_id(id);
  return out;
}

namespace {

using result_t = caf::result<v1::Response>;
using promise_t = caf::typed_response_promise<v1::Response>;

/// What an audit record says of a response.
std::string outcome(const v1::Response& resp) {
  return resp.has_error() ? "failed: " + resp.error().message() : "ok";
}

/// The request's body name in words, e.g. "list api tokens" (a refusal of
/// a request without an audit name of its own is audited so, in the words
/// of the others: "create join token", not "list_api_tokens").
std::string request_kind(const v1::Request& req) {
  auto* field = req.GetDescriptor()->FindFieldByNumber(req.body_case());
  if (field == nullptr)
    return "unknown request";
  auto words = field->name();
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

/// What a request acts on, for the audit record of a refusal (an allowed
/// request's handler names it itself): its body's first non-empty field of
/// "machine", "name", "gpu", "pool", "id" ("machine/gpu" when it names
/// both, as clear-fault's record does), looked for one message deep
/// (CreateWorkspace's workspace), a repeated one joined by ","; "" when it
/// has none (a token minted for no one yet).
std::string request_target(const v1::Request& req) {
  using google::protobuf::FieldDescriptor;
  const auto* field = req.GetDescriptor()->FindFieldByNumber(req.body_case());
  if (field == nullptr || field->type() != FieldDescriptor::TYPE_MESSAGE)
    return {};
  const auto& body = req.GetReflection()->GetMessage(req, field);
  auto from = [](const google::protobuf::Message& m) -> std::string {
    const auto* d = m.GetDescriptor();
    const auto* refl = m.GetReflection();
    for (const char* name : {"machine", "name", "gpu", "pool", "id"}) {
      const auto* f = d->FindFieldByName(name);
      if (f == nullptr || f->cpp_type() != FieldDescriptor::CPPTYPE_STRING)
        continue;
      if (!f->is_repeated()) {
        auto v = refl->GetString(m, f);
        if (!v.empty())
          return v;
        continue;
      }
      std::string joined;
      for (int i = 0; i < refl->FieldSize(m, f); ++i)
        joined += (joined.empty() ? "" : ",") + refl->GetRepeatedString(m, f, i);
      if (!joined.empty())
        return joined;
    }
    return {};
  };
  auto target = from(body);
  // A GPU of a machine reads as the allowed clear-fault's does: "dgx-01/GPU-...".
  if (const auto* gpu = body.GetDescriptor()->FindFieldByName("gpu");
      gpu != nullptr && gpu->cpp_type() == FieldDescriptor::CPPTYPE_STRING && !gpu->is_repeated()
      && !target.empty()) {
    auto id = body.GetReflection()->GetString(body, gpu);
    if (!id.empty() && id != target)
      target += "/" + id;
  }
  if (!target.empty())
    return target;
  const auto* d = body.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated()
        && body.GetReflection()->HasField(body, f)) {
      target = from(body.GetReflection()->GetMessage(body, f));
      if (!target.empty())
        return target;
    }
  }
  return {};
}

caf::expected<machine_actor> find_machine(const cluster_request& r,
                                          const std::string& name) {
  auto& machines = r.self->state.machines;
  auto i = machines.find(name);
  if (i == machines.end())
    return caf::make_error(ec::no_such_machine, "no machine named " + name);
  return i->second;
}

std::vector<machine_actor> machine_handles(const cluster_request& r) {
  std::vector<machine_actor> out;
  out.reserve(r.self->state.machines.size());
  for (auto& [name, m] : r.self->state.machines)
    out.push_back(m);
  return out;
}

void warn_no_answer(const caf::error& err) {
  spdlog::warn("cluster: a machine did not answer: {}", render_error(err));
}

/// Delivers `err` as request `id`'s Response on `rp`.
auto deliver_error(promise_t rp, uint64_t id) {
  return [rp, id](caf::error& err) mutable { rp.deliver(error_response(id, err)); };
}

/// The error of a controller without tokens.
caf::error no_tokens() {
  return caf::make_error(ec::invalid_request, "this controller keeps no tokens");
}

/// The error of a controller without a scheduler.
caf::error no_scheduler() {
  return caf::make_error(ec::invalid_request, "this controller runs no scheduler");
}

// -- machines ----------------------------------------------------------------

/// Forwards one question (`xs...`) to machine `name`, answering its
/// MachineView; an audited row records the result under `name`.
template <class... Ts>
result_t ask_machine(const cluster_request& r, const std::string& name, Ts... xs) {
  auto done = [self = r.self, caller = r.caller(), action = r.action(),
               name](const v1::Response& resp) {
    if (!action.empty())
      audit(self, caller, action, name, outcome(resp));
  };
  auto m = find_machine(r, name);
  if (!m) {
    auto resp = r.error(m.error());
    done(resp);
    return resp;
  }
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(*m, r.timeout, xs...)
    .then(
      [rp, id = r.id, done](v1::MachineView& view) mutable {
        v1::Response resp;
        resp.set_id(id);
        *resp.mutable_machine() = std::move(view);
        done(resp);
        rp.deliver(std::move(resp));
      },
      [rp, id = r.id, done](caf::error& err) mutable {
        auto resp = error_response(id, err);
        done(resp);
        rp.deliver(std::move(resp));
      });
  return rp;
}

result_t list_machines(const cluster_request& r) {
  auto rp = r.self->make_response_promise<v1::Response>();
  gather<v1::MachineView>(
    r.self, machine_handles(r), r.timeout,
    [rp, id = r.id](std::vector<v1::MachineView> views) mutable {
      std::sort(views.begin(), views.end(),
                [](const auto& a, const auto& b) { return a.name() < b.name(); });
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

/// Issue 12: the fabrics and topology findings of every machine (or those
/// of a pool), worked out from what their agents last reported.
result_t get_topology(const cluster_request& r) {
  // A pool that cannot be a label's value is a typo, not an empty cluster.
  if (const auto& pool = r.req.get_topology().pool(); !pool.empty())
    if (auto err = check_label("pool", pool))
      return r.error(std::move(err));
  auto rp = r.self->make_response_promise<v1::Response>();
  gather<v1::MachineView>(
    r.self, machine_handles(r), r.timeout,
    [rp, id = r.id, pool = r.req.get_topology().pool(),
     clock = r.self->state.config.clock](std::vector<v1::MachineView> views) mutable {
      v1::MachineList list;
      bool in_pool = pool.empty();
      for (auto& v : views) {
        auto p = v.labels().find("pool");
        in_pool = in_pool || (p != v.labels().end() && p->second == pool);
        *list.add_machines() = std::move(v);
      }
      // A pool no machine is in is a typo, said as validate and report say
      // it (a seventh new-user trial read "No machine reports an RDMA port").
      if (!in_pool) {
        rp.deliver(error_response(id, caf::make_error(ec::invalid_request,
                                                      "no machine in pool " + pool)));
        return;
      }
      v1::Response out;
      out.set_id(id);
      *out.mutable_topology() = validation::analyse_topology(list, pool, clock->now_unix_ms());
      rp.deliver(std::move(out));
    },
    warn_no_answer, atom::get_v);
  return rp;
}

result_t get_machine(const cluster_request& r) {
  return ask_machine(r, r.req.get_machine().name(), atom::get_v);
}

result_t set_cordon(const cluster_request& r) {
  const auto& body = r.req.set_cordon();
  return ask_machine(r, body.name(), atom::cordon_v, body.cordoned());
}

result_t set_labels(const cluster_request& r) {
  return ask_machine(r, r.req.set_labels().name(), r.req.set_labels());
}

result_t set_maintenance(const cluster_request& r) {
  const auto& body = r.req.set_maintenance();
  return ask_machine(r, body.name(), atom::maintenance_v, body.maintenance());
}

result_t list_gpus(const cluster_request& r) {
  std::vector<machine_actor> targets;
  const auto& only = r.req.list_gpus().machine();
  if (only.empty()) {
    targets = machine_handles(r);
  } else {
    auto m = find_machine(r, only);
    if (!m)
      return r.error(m.error());
    targets.push_back(*m);
  }
  auto rp = r.self->make_response_promise<v1::Response>();
  gather<std::vector<v1::GpuView>>(
    r.self, targets, r.timeout,
    [rp, id = r.id](std::vector<std::vector<v1::GpuView>> per_machine) mutable {
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

result_t clear_fault(const cluster_request& r) {
  const auto& cf = r.req.clear_fault();
  auto m = find_machine(r, cf.machine());
  auto target = cf.machine() + "/" + cf.gpu();
  auto record = [self = r.self, caller = r.caller(), action = r.action(),
                 target](const std::string& result) {
    audit(self, caller, action, target, result);
  };
  if (!m) {
    record("refused: " + render_error(m.error()));
    return r.error(m.error());
  }
  if (cf.gpu().empty())
    return r.error(caf::make_error(ec::invalid_request, "name the GPU to clear"));
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(*m, r.timeout, atom::clear_v, cf.gpu())
    .then(
      [rp, id = r.id, record, validations = r.self->state.config.validations,
       machine = cf.machine()](v1::ClearFaultResult& result) mutable {
        record(result.cleared() ? "cleared" : "nothing latched");
        // A quick check that failed before the repair runs again.
        if (result.cleared() && validations)
          caf::anon_send(validations, atom::clear_v, machine);
        v1::Response out;
        out.set_id(id);
        *out.mutable_cleared() = std::move(result);
        rp.deliver(std::move(out));
      },
      [rp, id = r.id, record](caf::error& err) mutable {
        record("failed: " + render_error(err));
        rp.deliver(error_response(id, err));
      });
  return rp;
}

result_t xid_policy(const cluster_request& r) {
  auto out = r.response();
  *out.mutable_xids() = r.self->state.config.xid_policy;
  return out;
}

// -- workspaces --------------------------------------------------------------

result_t create_workspace(const cluster_request& r) {
  auto& st = r.self->state;
  auto ws = r.req.create_workspace().workspace();
  // An admin action: audited with its result.
  auto fail = [&](const caf::error& err) {
    r.audit(ws.name(), "failed: " + render_error(err));
    return r.error(err);
  };
  if (auto err = validate_workspace(ws))
    return fail(err);
  // Machine paths and privileged work are granted one way only, audited
  // with what changed (issue 16).
  if (ws.bind_grants_size() > 0 || ws.allow_privileged())
    return fail(caf::make_error(ec::invalid_request,
                                "bind_grants and allow_privileged: create the workspace "
                                "first, then grant them with astra workspace grant " + ws.name()
                                  + " --path PATH [--privileged] (or PUT …/workspaces/"
                                  + ws.name() + "/grants)"));
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
  ws.set_created_unix_ms(r.self->state.config.clock->now_unix_ms());
  if (auto err = st.config.store->put(family::workspaces, ws.name(), ws, true))
    return fail(err);
  r.audit(ws.name(), "ok");
  st.workspaces[ws.name()] = ws;
  spdlog::info("cluster: workspace {} created (organisation {}, {} grant(s))",
               ws.name(), ws.organisation(), ws.grants_size());
  auto out = r.response();
  *out.mutable_workspace() = std::move(ws);
  return out;
}

result_t list_workspaces(const cluster_request& r) {
  const auto& workspaces = r.self->state.workspaces;
  auto out = r.response();
  auto* list = out.mutable_workspaces();
  if (!workspaces.count(default_workspace)) {
    auto* d = list->add_workspaces();
    d->set_name(default_workspace);
    d->set_organisation("default");
  }
  for (const auto& [name, ws] : workspaces)
    *list->add_workspaces() = ws;
  // The default workspace is the cluster's own: its runs may do privileged
  // work (set_workspace_grants refuses to change that), so its record says
  // so, as `astra workspaces`' table does (a new-user trial saw JSON say
  // false and the table yes).
  for (auto& ws : *list->mutable_workspaces())
    if (ws.name() == default_workspace)
      ws.set_allow_privileged(true);
  return out;
}

// -- runs --------------------------------------------------------------------

/// Delivers a run as request `id`'s Response on `rp`, with its console page.
auto deliver_run(cluster_ptr self, promise_t rp, uint64_t id) {
  return [self, rp, id](v1::Run& run) mutable {
    for_display(run, false);
    run.set_console_url(run_console_url(self->state.config, run.spec()));
    v1::Response out;
    out.set_id(id);
    *out.mutable_run() = std::move(run);
    rp.deliver(std::move(out));
  };
}

result_t submit_run(const cluster_request& r) {
  auto& st = r.self->state;
  if (!st.config.scheduler)
    return r.error(no_scheduler());
  // The workspace is resolved before any promise is made.
  auto spec = r.req.submit_run().spec();
  auto wname = spec.workspace().empty() ? std::string{default_workspace}
                                        : spec.workspace();
  auto w = st.workspaces.find(wname);
  if (w == st.workspaces.end() && wname != default_workspace)
    return r.error(caf::make_error(ec::invalid_request,
                                   "no workspace named " + wname
                                     + "; create it with: astra workspace create "
                                     + wname + " --grant pool=NAME"));
  // The default workspace's machine paths and host processes are an
  // admin's (a member there would be root on every machine).
  const bool admin = !st.config.tokens || has_role(r.caller(), role::admin);
  if (auto err = apply_workspace(w == st.workspaces.end() ? nullptr : &w->second,
                                 spec, admin))
    return r.error(err);
  // The run is its submitter's, whatever the spec says.
  spec.set_owner(r.caller().name());
  // Issue 21: priority and the validation mark are the controller's own.
  spec.clear_priority();
  spec.clear_validation();
  spec.clear_result_line();
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(st.config.scheduler, r.timeout, atom::submit_v, std::move(spec))
    .then(deliver_run(r.self, rp, r.id), deliver_error(rp, r.id));
  return rp;
}

/// The workspace `run` was submitted to ("default" when it named none).
std::string workspace_of(const v1::Run& run) {
  return run.spec().workspace().empty() ? std::string{default_workspace}
                                        : run.spec().workspace();
}

result_t get_run(const cluster_request& r) {
  auto& sched = r.self->state.config.scheduler;
  if (!sched)
    return r.error(no_scheduler());
  // Issue 13: the name within the workspace asked for (the scheduler
  // resolves a bare name: the default workspace, else the only one).
  const auto& q = r.req.get_run();
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(sched, r.timeout, atom::get_v, run_ref(q.workspace(), q.name()))
    .then(deliver_run(r.self, rp, r.id), deliver_error(rp, r.id));
  return rp;
}

result_t delete_run(const cluster_request& r) {
  auto& st = r.self->state;
  auto sched = st.config.scheduler;
  if (!sched)
    return r.error(no_scheduler());
  auto rp = r.self->make_response_promise<v1::Response>();
  auto on_run = deliver_run(r.self, rp, r.id);
  auto on_error = deliver_error(rp, r.id);
  const auto& q = r.req.delete_run();
  const auto ref = run_ref(q.workspace(), q.name());
  bool any_owner = !st.config.tokens || has_role(r.caller(), role::admin);
  if (any_owner) {
    r.self->request(sched, r.timeout, atom::remove_v, ref).then(on_run, on_error);
    return rp;
  }
  // Members stop only their own runs: the run the reference means is
  // looked at first, then deleted by its key.
  r.self->request(sched, r.timeout, atom::get_v, ref)
    .then(
      [self = r.self, sched, timeout = r.timeout, name = q.name(), owner = r.caller().name(),
       on_run, on_error, rp, id = r.id](v1::Run& run) mutable {
        if (run.spec().owner() != owner) {
          rp.deliver(error_response(
            id, caf::make_error(ec::permission_denied,
                                "run " + name + " is "
                                  + (run.spec().owner().empty()
                                       ? std::string{"nobody's"}
                                       : run.spec().owner() + "'s")
                                  + "; a member stops only their own runs")));
          return;
        }
        const auto& spec = run.spec();
        self->request(sched, timeout, atom::remove_v, run_ref(spec.workspace(), spec.name()))
          .then(on_run, on_error);
      },
      on_error);
  return rp;
}

result_t list_runs(const cluster_request& r) {
  auto& sched = r.self->state.config.scheduler;
  if (!sched)
    return r.error(no_scheduler());
  // A workspace that does not exist is named (404 over the API), not an
  // empty list (a new-user trial's typo read as "no runs").
  const auto& wanted = r.req.list_runs().workspace();
  if (!wanted.empty() && wanted != default_workspace
      && !r.self->state.workspaces.count(wanted))
    return r.error(caf::make_error(ec::invalid_request, "no workspace named " + wanted
                                                          + " (astra workspaces lists them)"));
  auto rp = r.self->make_response_promise<v1::Response>();
  r.self->request(sched, r.timeout, atom::runs_v)
    .then(
      [self = r.self, rp, id = r.id,
       workspace = r.req.list_runs().workspace()](v1::RunList& runs) mutable {
        // --workspace: that workspace's runs only.
        if (!workspace.empty()) {
          auto* all = runs.mutable_runs();
          all->erase(std::remove_if(all->begin(), all->end(),
                                    [&](const v1::Run& run) {
                                      return workspace_of(run) != workspace;
                                    }),
                     all->end());
        }
        for (auto& run : *runs.mutable_runs()) {
          for_display(run, true);
          run.set_console_url(run_console_url(self->state.config, run.spec()));
        }
        v1::Response out;
        out.set_id(id);
        *out.mutable_runs() = std::move(runs);
        rp.deliver(std::move(out));
      },
      deliver_error(rp, r.id));
  return rp;
}

/// The worker of `run` that a log request means (its rank, in the copy
/// asked for, else the lowest array index first); null when there is none.
const v1::WorkerAssignment* log_worker(const v1::Run& run, const v1::GetLogs& q) {
  auto rank = q.worker() < 0 ? 0u : static_cast<uint32_t>(q.worker());
  const v1::WorkerAssignment* w = nullptr;
  for (const auto& x : run.workers())
    if (x.rank() == rank && (!q.has_copy() || x.array_index() == q.copy())
        && (!w || x.array_index() < w->array_index()))
      w = &x;
  return w;
}

/// "0-2": the array copies `run`'s workers are in; empty for a run that is
/// not an array.
std::string copies_text(const v1::Run& run) {
  std::set<int32_t> copies;
  for (const auto& x : run.workers())
    if (x.array_index() >= 0)
      copies.insert(x.array_index());
  if (copies.empty())
    return {};
  if (copies.size() == 1)
    return std::to_string(*copies.begin());
  return std::to_string(*copies.begin()) + "-" + std::to_string(*copies.rbegin());
}

/// Asks the machine that holds `run`'s worker for its log, answering on `rp`.
void fetch_logs(cluster_ptr self, promise_t rp, uint64_t id, caf::timespan timeout,
                const v1::GetLogs& q, const v1::Run& run) {
  const auto* w = log_worker(run, q);
  if (!w) {
    auto rank = q.worker() < 0 ? 0u : static_cast<uint32_t>(q.worker());
    auto copies = copies_text(run);
    std::string where;
    if (q.has_copy())
      where = copies.empty() ? " in copy " + std::to_string(q.copy()) + " (it is not an array run)"
                             : " in copy " + std::to_string(q.copy()) + " (its copies placed: "
                                 + copies + ")";
    rp.deliver(error_response(
      id, caf::make_error(ec::invalid_request,
                          "run " + q.run() + " has no worker " + std::to_string(rank) + where
                            + (run.workers_size() == 0
                                 ? " (it is " + run.state() + ": not placed yet)"
                                 : ""))));
    return;
  }
  auto m = self->state.machines.find(w->machine());
  if (m == self->state.machines.end()) {
    rp.deliver(error_response(
      id, caf::make_error(ec::no_such_machine, "no machine named " + w->machine())));
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
      deliver_error(rp, id));
}

result_t get_logs(const cluster_request& r) {
  // The run says where the worker is; its machine's agent keeps the log.
  auto& sched = r.self->state.config.scheduler;
  if (!sched)
    return r.error(no_scheduler());
  auto rp = r.self->make_response_promise<v1::Response>();
  const auto& q = r.req.get_logs();
  r.self->request(sched, r.timeout, atom::get_v, run_ref(q.workspace(), q.run()))
    .then(
      [self = r.self, rp, id = r.id, timeout = r.timeout, q](v1::Run& run) mutable {
        fetch_logs(self, rp, id, timeout, q, run);
      },
      deliver_error(rp, r.id));
  return rp;
}

// -- validations (issue 21) -------------------------------------------------

/// What a validation request's audit record names as its target.
std::string validation_target(const v1::Request& req) {
  switch (req.body_case()) {
  case v1::Request::kStartValidation: {
    const auto& s = req.start_validation();
    return s.suite() + " on " + (s.pool().empty() ? s.machine() : "pool " + s.pool());
  }
  case v1::Request::kSetValidationPolicy: return "pool " + req.set_validation_policy().policy().pool();
  case v1::Request::kDeleteValidationPolicy: return "pool " + req.delete_validation_policy().pool();
  case v1::Request::kAcceptMachine: return req.accept_machine().machine();
  case v1::Request::kCancelValidation: return "validation " + req.cancel_validation().id();
  default: return {};
  }
}

/// Validation requests are answered by the validations actor; the admin's
/// ones are audited here with their outcome.
result_t to_validations(const cluster_request& r) {
  auto& v = r.self->state.config.validations;
  if (!v)
    return r.error(caf::make_error(ec::invalid_request,
                                   "this controller runs no validations"));
  auto rp = r.self->make_response_promise<v1::Response>();
  bool audited = r.row.audit_name != nullptr;
  auto target = validation_target(r.req);
  auto reason = r.req.has_accept_machine() ? " (reason: " + r.req.accept_machine().reason() + ")"
                : r.req.has_cancel_validation() && !r.req.cancel_validation().reason().empty()
                  ? " (reason: " + r.req.cancel_validation().reason() + ")"
                  : std::string{};
  auto action = audited ? r.action() : std::string{};
  r.self->request(v, r.timeout, r.req)
    .then(
      [self = r.self, rp, audited, target, reason, action,
       who = r.req.caller()](v1::Response& resp) mutable {
        if (audited) {
          // A request the cluster's state refuses (accepting a machine that
          // is not Accepting) is audited as the other refusals are.
          const bool refused =
            resp.has_error() && resp.error().code() == to_string(ec::failed_precondition);
          std::string result = !resp.has_error() ? std::string{"ok"}
                               : (refused ? "refused: " : "failed: ") + resp.error().message();
          if (resp.has_validation())
            result += ": " + resp.validation().id();
          audit(self, who, action, target, result + reason);
        }
        rp.deliver(std::move(resp));
      },
      deliver_error(rp, r.id));
  return rp;
}

// -- tokens and the audit log ------------------------------------------------

result_t create_join_token(const cluster_request& r) {
  const auto& config = r.self->state.config;
  const auto& body = r.req.create_join_token();
  std::map<std::string, std::string> labels(body.labels().begin(), body.labels().end());
  std::string what;
  for (const auto& [k, v] : labels)
    what += (what.empty() ? "" : ",") + k + "=" + v;
  if (!config.tokens)
    return r.error(no_tokens());
  auto minted = config.tokens->mint_join(labels, body.ttl_seconds(),
                                         r.caller().name(), r.self->state.config.clock->now_unix_ms());
  if (!minted) {
    r.audit(what, "failed: " + render_error(minted.error()));
    return r.error(minted.error());
  }
  r.audit(what, "ok: token " + minted->second.id());
  auto out = r.response();
  auto* t = out.mutable_join_token();
  t->set_token(std::move(minted->first));
  t->set_id(minted->second.id());
  t->set_expires_unix_ms(minted->second.expires_unix_ms());
  *t->mutable_labels() = minted->second.labels();
  t->set_controller_key(config.controller_key);
  t->set_controller_address(config.advertise_address);
  if (config.install) {
    auto site = config.install->get();
    if (!site.api_url.empty())
      t->set_install(install_script_command(*t, site));
  }
  return out;
}

result_t create_api_token(const cluster_request& r) {
  const auto& config = r.self->state.config;
  const auto& body = r.req.create_api_token();
  auto wanted = parse_role(body.role().empty() ? "member" : body.role());
  auto target = body.name() + " (" + body.role() + ")";
  caf::error err;
  if (!config.tokens)
    err = no_tokens();
  else if (!wanted)
    err = caf::make_error(ec::invalid_request,
                          "role '" + body.role() + "': use owner, admin or member");
  else if (*wanted == role::owner && !has_role(r.caller(), role::owner))
    err = caf::make_error(ec::permission_denied,
                          "only an owner may create an owner token");
  if (err) {
    r.audit(target, "refused: " + render_error(err));
    return r.error(err);
  }
  auto minted = config.tokens->mint_api(body.name(), *wanted, body.ttl_seconds(),
                                        r.caller().name(), r.self->state.config.clock->now_unix_ms());
  if (!minted) {
    r.audit(target, "failed: " + render_error(minted.error()));
    return r.error(minted.error());
  }
  r.audit(target, "ok: token " + minted->second.id());
  auto out = r.response();
  auto* t = out.mutable_api_token();
  t->set_token(std::move(minted->first));
  t->set_id(minted->second.id());
  t->set_name(minted->second.name());
  t->set_role(minted->second.role());
  t->set_expires_unix_ms(minted->second.expires_unix_ms());
  return out;
}

result_t revoke_api_token(const cluster_request& r) {
  const auto& tokens = r.self->state.config.tokens;
  const auto& tid = r.req.revoke_api_token().id();
  if (!tokens)
    return r.error(no_tokens());
  // As only an owner may create an owner token, only an owner may revoke
  // one (a fifth new-user trial: an admin revoked an owner's token).
  if (!has_role(r.caller(), role::owner)) {
    auto listed = tokens->list_api();
    if (!listed) {
      r.audit(tid, "failed: " + render_error(listed.error()));
      return r.error(listed.error());
    }
    for (const auto& t : *listed)
      if (t.id() == tid && t.role() == "owner") {
        auto err = caf::make_error(ec::permission_denied,
                                   "only an owner may revoke an owner token");
        r.audit(tid, "refused: " + render_error(err));
        return r.error(err);
      }
  }
  auto revoked = tokens->revoke_api(tid, r.self->state.config.clock->now_unix_ms());
  if (!revoked) {
    r.audit(tid, "failed: " + render_error(revoked.error()));
    return r.error(revoked.error());
  }
  r.audit(tid, "ok");
  auto out = r.response();
  auto* t = out.mutable_api_token();
  t->set_id(revoked->id());
  t->set_name(revoked->name());
  t->set_role(revoked->role());
  t->set_expires_unix_ms(revoked->expires_unix_ms());
  return out;
}

result_t whoami(const cluster_request& r) {
  auto out = r.response();
  *out.mutable_principal() = r.caller();
  return out;
}

result_t list_audit(const cluster_request& r) {
  auto limit = r.req.list_audit().limit() == 0 ? 100u : r.req.list_audit().limit();
  std::vector<v1::AuditRecord> all;
  auto err = r.self->state.config.store->for_each(
    family::audit, [&](std::string_view, std::string_view bytes) {
      v1::AuditRecord rec;
      if (rec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        all.push_back(std::move(rec));
      return true;
    });
  if (err)
    return r.error(err);
  auto out = r.response();
  auto* list = out.mutable_audit();
  for (auto i = all.rbegin(); i != all.rend() && limit > 0; ++i, --limit)
    *list->add_records() = std::move(*i);
  return out;
}

// -- the table ---------------------------------------------------------------

/// Audit names of the audited rows (kept as users and tests read them).
const char* cordon_name(const v1::Request& req) {
  return req.set_cordon().cordoned() ? "cordon" : "uncordon";
}
const char* maintenance_name(const v1::Request& req) {
  return req.set_maintenance().maintenance() ? "maintenance on" : "maintenance off";
}
const char* label_name(const v1::Request&) {
  return "label";
}
const char* clear_fault_name(const v1::Request&) {
  return "clear-fault";
}
const char* create_workspace_name(const v1::Request&) {
  return "create workspace";
}
const char* join_token_name(const v1::Request&) {
  return "create join token";
}
const char* api_token_name(const v1::Request&) {
  return "create API token";
}
const char* revoke_name(const v1::Request&) {
  return "revoke API token";
}
const char* validate_name(const v1::Request&) {
  return "validate";
}
const char* policy_name(const v1::Request&) {
  return "set validation policy";
}
const char* delete_policy_name(const v1::Request&) {
  return "delete validation policy";
}
const char* accept_name(const v1::Request&) {
  return "accept machine";
}
const char* cancel_validation_name(const v1::Request&) {
  return "cancel validation";
}

const char* grant_name(const v1::Request&) {
  return "grant workspace";
}

const char* remove_machine_name(const v1::Request&) {
  return "remove machine";
}
const char* revoke_join_name(const v1::Request&) {
  return "revoke join token";
}
const char* drain_name(const v1::Request&) {
  return "drain";
}
const char* data_location_name(const v1::Request&) {
  return "set data location";
}
const char* delete_workspace_name(const v1::Request&) {
  return "delete workspace";
}

using R = v1::Request;

} // namespace

// Bodies whose handlers are on branches not landed yet (the data location,
// workspace grants and the topology): refused in words.
caf::result<v1::Response> not_supported_yet(const cluster_request& r) {
  const auto* field = v1::Request::descriptor()->FindFieldByNumber(r.req.body_case());
  return r.error(caf::make_error(ec::invalid_request,
                                 std::string{"not supported yet: "} + (field ? field->name() : "request")));
}

const std::vector<cluster_request_row>& cluster_request_table() {
  static const std::vector<cluster_request_row> rows{
    // kind                 minimum role   audit name             handler
    {R::kListMachines,     role::member, nullptr,               list_machines},
    {R::kGetMachine,       role::member, nullptr,               get_machine},
    {R::kSetCordon,        role::admin,  cordon_name,           set_cordon},
    {R::kSetMaintenance,   role::admin,  maintenance_name,      set_maintenance},
    {R::kListGpus,         role::member, nullptr,               list_gpus},
    {R::kClearFault,       role::admin,  clear_fault_name,      clear_fault},
    {R::kXidPolicy,        role::member, nullptr,               xid_policy},
    {R::kSubmitRun,        role::member, nullptr,               submit_run},
    {R::kListRuns,         role::member, nullptr,               list_runs},
    {R::kGetRun,           role::member, nullptr,               get_run},
    {R::kDeleteRun,        role::member, nullptr,               delete_run},
    {R::kCreateWorkspace,  role::admin,  create_workspace_name, create_workspace},
    {R::kListWorkspaces,   role::member, nullptr,               list_workspaces},
    {R::kCreateJoinToken,  role::admin,  join_token_name,       create_join_token},
    {R::kCreateApiToken,   role::admin,  api_token_name,        create_api_token},
    {R::kRevokeApiToken,   role::admin,  revoke_name,           revoke_api_token},
    {R::kWhoami,           role::member, nullptr,               whoami},
    {R::kListAudit,        role::admin,  nullptr,               list_audit},
    {R::kSetLabels,        role::admin,  label_name,            set_labels},
    {R::kGetLogs,          role::member, nullptr,               get_logs},
    {R::kStartValidation,  role::admin,  validate_name,         to_validations},
    {R::kListValidations,  role::member, nullptr,               to_validations},
    {R::kGetValidation,    role::member, nullptr,               to_validations},
    {R::kGetReport,        role::member, nullptr,               to_validations},
    {R::kSetValidationPolicy, role::admin, policy_name,         to_validations},
    {R::kAcceptMachine,    role::admin,  accept_name,           to_validations},
    {R::kListValidationPolicies, role::member, nullptr,         to_validations},
    {R::kDeleteValidationPolicy, role::admin, delete_policy_name, to_validations},
    {R::kCancelValidation, role::admin,  cancel_validation_name, to_validations},
    // issue 13 (cli): day-two commands (actors/controller/cluster_day2_requests.cpp).
    {R::kRemoveMachine,    role::admin,  remove_machine_name,   day2::remove_machine},
    {R::kDrainMachine,     role::admin,  drain_name,            day2::drain_machine},
    // issue 20 (installer): audited by its handler, with the path.
    {R::kSetDataLocation,  role::admin,  data_location_name,    day2::set_data_location},
    {R::kListJoinTokens,   role::admin,  nullptr,               day2::list_join_tokens},
    {R::kRevokeJoinToken,  role::admin,  revoke_join_name,      day2::revoke_join_token},
    {R::kListApiTokens,    role::admin,  nullptr,               day2::list_api_tokens},
    {R::kDeleteWorkspace,  role::admin,  delete_workspace_name, day2::delete_workspace},
    {R::kGetGpuHistory,    role::member, nullptr,               day2::get_gpu_history},
    // issue 16 (run specs): audited by its handler, with what changed.
    {R::kSetWorkspaceGrants, role::admin, grant_name,           day2::set_workspace_grants},
    {R::kGetTopology,      role::member, nullptr,               get_topology},
  };
  return rows;
}

const cluster_request_row* find_cluster_request(v1::Request::BodyCase kind) {
  const auto& rows = cluster_request_table();
  auto i = std::find_if(rows.begin(), rows.end(),
                        [kind](const auto& row) { return row.kind == kind; });
  return i != rows.end() ? &*i : nullptr;
}

role required_role(const v1::Request& req) {
  const auto* row = find_cluster_request(req.body_case());
  return row != nullptr ? row->minimum : role::admin;
}

caf::result<v1::Response> answer_cluster_request(cluster_ptr self,
                                                 const v1::Request& req) {
  auto& st = self->state;
  const auto& caller = req.caller();
  auto need = required_role(req);
  if (st.config.tokens && !has_role(caller, need)) {
    auto err = caller.role().empty()
                 ? caf::make_error(ec::unauthenticated,
                                   "no API token: run `astra login`, or set "
                                   "ASTRAEUS_TOKEN")
                 : caf::make_error(ec::permission_denied,
                                   caller.name() + " is a " + caller.role() + "; only "
                                     + (need == role::member
                                          ? std::string{"members"}
                                          : std::string{"owners and admins"})
                                     + " may do this");
    if (need != role::member) {
      // As the allowed action would read: its name and what it acts on.
      const auto* row = find_cluster_request(req.body_case());
      auto action = row != nullptr && row->audit_name != nullptr
                      ? std::string{row->audit_name(req)}
                      : request_kind(req);
      // A validation request's target as its allowed one reads ("validation
      // val-…", "acceptance on pool h100").
      auto target = validation_target(req);
      audit(self, caller, action, target.empty() ? request_target(req) : target,
            "refused: " + render_error(err));
    }
    return error_response(req.id(), err);
  }
  const auto* row = find_cluster_request(req.body_case());
  if (row == nullptr)
    return error_response(req.id(), caf::make_error(ec::invalid_request,
                                                    "request carries no known body "
                                                    "(is astra newer than the "
                                                    "controller?)"));
  return row->handler(cluster_request{self, req, *row, req.id(),
                                      st.config.request_timeout});
}

} // namespace astraeus
