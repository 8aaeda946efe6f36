// The API's route table and its machine, GPU and metrics handlers.

#include <atomic>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "messages/json.hpp"
#include "runtime/http/api_routes_internal.hpp"
#include "runtime/http/prometheus_metrics.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::http {

// -- shared helpers ------------------------------------------------------------

v1::Response ask_cluster(api_context& ctx, v1::Request req) {
  *req.mutable_caller() = ctx.caller;
  return ctx.backend.call(std::move(req));
}

bool reply_failed(api_context& ctx, const v1::Response& resp) {
  if (!resp.has_error())
    return false;
  reply_error(ctx.res, http_status_of(resp.error()), resp.error().code(),
              resp.error().message());
  return true;
}

bool is_json_object(const std::string& body) {
  auto i = body.find_first_not_of(" \t\r\n");
  return i != std::string::npos && body[i] == '{';
}

bool read_body(api_context& ctx, google::protobuf::Message& out, bool empty_ok) {
  auto is_blank = ctx.req.body.find_first_not_of(" \t\r\n") == std::string::npos;
  if (is_blank) {
    out.Clear();
    if (empty_ok)
      return true;
    reply_error(ctx.res, 400, "invalid_request",
                "body: empty; send a JSON " + out.GetDescriptor()->name() + " object");
    return false;
  }
  if (!is_json_object(ctx.req.body)) {
    reply_error(ctx.res, 400, "invalid_request",
                "body: not a JSON object; send a JSON " + out.GetDescriptor()->name()
                  + " object ({...})");
    return false;
  }
  if (auto err = message_from_json(ctx.req.body, out, "body")) {
    reply_error(ctx.res, 400, "invalid_request", render_error(err));
    return false;
  }
  return true;
}

std::optional<uint64_t> query_number(api_context& ctx, const char* name, uint64_t lo,
                                     uint64_t hi, uint64_t fallback) {
  if (!ctx.req.has_param(name))
    return fallback;
  auto text = ctx.req.get_param_value(name);
  uint64_t x = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char c : text)
    ok = ok && c >= '0' && c <= '9', x = ok ? x * 10 + static_cast<uint64_t>(c - '0') : x;
  if (!ok || x < lo || x > hi) {
    reply_error(ctx.res, 400, "invalid_request",
                std::string{name} + ": '" + text + "' is not a whole number from "
                  + std::to_string(lo) + " to " + std::to_string(hi));
    return std::nullopt;
  }
  return x;
}

namespace {

/// Blocking queries waiting now; at most half the HTTP threads may wait.
std::atomic<uint32_t> watches{0};

/// The view a list answers from: the current one, or with `?index=N` the
/// first one past N within `?wait=` (default 5m, at most 10m, Nomad's).
/// Null after writing an error (400, or 429 when too many watch).
std::shared_ptr<const api_view> list_view(api_context& ctx) {
  if (!ctx.req.has_param("index"))
    return ctx.backend.view();
  auto index = query_number(ctx, "index", 0, UINT64_MAX / 2, 0);
  if (!index)
    return nullptr;
  uint64_t wait_s = 300;
  if (ctx.req.has_param("wait")) {
    auto w = parse_seconds(ctx.req.get_param_value("wait"));
    if (!w || *w > 600) {
      reply_error(ctx.res, 400, "invalid_request",
                  "wait: '" + ctx.req.get_param_value("wait")
                    + "' is not a duration up to 10m (e.g. 30s, 5m)");
      return nullptr;
    }
    wait_s = *w;
  }
  auto now = ctx.backend.view();
  if (now->index > *index || wait_s == 0)
    return now;
  if (watches.fetch_add(1) + 1 > std::max<uint32_t>(1, ctx.cfg.threads / 2)) {
    watches.fetch_sub(1);
    ctx.res.set_header("Retry-After", "1");
    reply_error(ctx.res, 429, "too_many_requests",
                "too many blocking queries are waiting; retry, or raise api.threads");
    return nullptr;
  }
  auto v = ctx.backend.wait_view(*index, std::chrono::seconds{wait_s});
  watches.fetch_sub(1);
  return v;
}

/// Writes one page of `items[first, last)` as {"<field>":[...]}.
template <class T>
void reply_page(api_context& ctx, const api_view& view,
                const std::vector<api_view_item<T>>& items, size_t first, size_t last,
                const char* field) {
  auto limit = query_number(ctx, "limit", 1, 100000, 0);
  if (!limit)
    return;
  std::string next;
  auto cursor = ctx.req.has_param("cursor") ? ctx.req.get_param_value("cursor") : std::string{};
  auto [lo, hi] = api_page(items, first, last, cursor, *limit, next);
  size_t bytes = 32;
  for (auto i = lo; i < hi; ++i)
    bytes += items[i].json().size() + 1;
  std::string out;
  out.reserve(bytes);
  out += "{\"";
  out += field;
  out += "\":[";
  for (auto i = lo; i < hi; ++i) {
    if (i > lo)
      out += ',';
    out += items[i].json();
  }
  out += "]}";
  ctx.res.set_header("X-Astraeus-Index", std::to_string(view.index));
  if (!next.empty())
    ctx.res.set_header("X-Next-Cursor", next);
  reply_json(ctx.res, 200, std::move(out));
}

/// Answers a request whose answer is a machine.
void reply_machine(api_context& ctx, v1::Request req, bool changes) {
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  if (changes)
    ctx.backend.refresh();
  reply_json(ctx.res, 200, message_to_json(resp.machine(), false));
}

/// Whether a body's `name` is empty or the machine of the path; writes a 400
/// when it names another.
bool names_the_path_machine(api_context& ctx, const std::string& name) {
  if (name.empty() || name == ctx.param("node"))
    return true;
  reply_error(ctx.res, 400, "invalid_request",
              "name: '" + name + "' is not the machine of the path (" + ctx.param("node") + ")");
  return false;
}

} // namespace

// -- machines -----------------------------------------------------------------

void list_nodes(api_context& ctx) {
  auto view = list_view(ctx);
  if (view)
    reply_page(ctx, *view, view->machines, 0, view->machines.size(), "machines");
}

void get_node(api_context& ctx) {
  v1::Request req;
  req.mutable_get_machine()->set_name(ctx.param("node"));
  reply_machine(ctx, std::move(req), false);
}

void cordon_node(api_context& ctx) {
  v1::Request req;
  req.mutable_set_cordon()->set_name(ctx.param("node"));
  req.mutable_set_cordon()->set_cordoned(true);
  reply_machine(ctx, std::move(req), true);
}

void uncordon_node(api_context& ctx) {
  v1::Request req;
  req.mutable_set_cordon()->set_name(ctx.param("node"));
  req.mutable_set_cordon()->set_cordoned(false);
  reply_machine(ctx, std::move(req), true);
}

void set_node_maintenance(api_context& ctx) {
  // {"maintenance": false} ends it; a body without "maintenance" (empty,
  // or {} or {"name": ...}) starts it, as POST .../maintenance reads.
  v1::SetMaintenance body;
  if (!read_body(ctx, body, true))
    return;
  auto doc = nlohmann::json::parse(ctx.req.body, nullptr, false);
  if (!doc.is_object() || !doc.contains("maintenance"))
    body.set_maintenance(true);
  if (!names_the_path_machine(ctx, body.name()))
    return;
  body.set_name(ctx.param("node"));
  v1::Request req;
  *req.mutable_set_maintenance() = body;
  reply_machine(ctx, std::move(req), true);
}

/// A node route whose JSON body is `Body` (its `name` absent or the path's
/// node): the body, named after the path's node, as the request `slot` of a
/// Request, answered with the machine.
template <class Body, class Slot>
void node_body_request(api_context& ctx, Slot slot) {
  Body body;
  if (!read_body(ctx, body, false))
    return;
  if (!names_the_path_machine(ctx, body.name()))
    return;
  body.set_name(ctx.param("node"));
  v1::Request req;
  *slot(req) = body;
  reply_machine(ctx, std::move(req), true);
}

void set_node_labels(api_context& ctx) {
  node_body_request<v1::SetLabels>(ctx, [](v1::Request& r) { return r.mutable_set_labels(); });
}

void set_node_data_location(api_context& ctx) {
  node_body_request<v1::SetDataLocation>(
    ctx, [](v1::Request& r) { return r.mutable_set_data_location(); });
}

// -- GPUs ---------------------------------------------------------------------

void list_gpus(api_context& ctx) {
  auto view = list_view(ctx);
  if (view)
    reply_page(ctx, *view, view->gpus, 0, view->gpus.size(), "gpus");
}

void list_node_gpus(api_context& ctx) {
  auto view = list_view(ctx);
  if (!view)
    return;
  const auto& node = ctx.param("node");
  if (view->machine(node) == nullptr) {
    reply_error(ctx.res, 404, "no_such_machine", "no machine named " + node);
    return;
  }
  auto [first, last] = view->gpus_of(node);
  reply_page(ctx, *view, view->gpus, first, last, "gpus");
}

namespace {

void reply_gpu(api_context& ctx, const std::string& node) {
  auto view = ctx.backend.view();
  const auto& id = ctx.param("uuid");
  if (!node.empty() && view->machine(node) == nullptr) {
    reply_error(ctx.res, 404, "no_such_machine", "no machine named " + node);
    return;
  }
  const auto* g = view->gpu(node, id);
  if (g == nullptr) {
    reply_error(ctx.res, 404, "not_found",
                "no GPU " + id + (node.empty() ? std::string{} : " on machine " + node));
    return;
  }
  ctx.res.set_header("X-Astraeus-Index", std::to_string(view->index));
  reply_json(ctx.res, 200, g->json());
}

} // namespace

void get_gpu(api_context& ctx) {
  reply_gpu(ctx, {});
}

void get_node_gpu(api_context& ctx) {
  reply_gpu(ctx, ctx.param("node"));
}

void get_node_gpu_history(api_context& ctx) {
  // ?since=<unix ms> (default: all kept), ?max_points=N (default: all).
  auto since = query_number(ctx, "since", 0, UINT64_MAX / 2, 0);
  if (!since)
    return;
  auto max_points = query_number(ctx, "max_points", 0, 100000, 0);
  if (!max_points)
    return;
  v1::Request req;
  auto* q = req.mutable_get_gpu_history();
  q->set_machine(ctx.param("node"));
  q->set_gpu(ctx.param("uuid"));
  q->set_since_unix_ms(static_cast<int64_t>(*since));
  q->set_max_points(static_cast<uint32_t>(*max_points));
  auto resp = ask_cluster(ctx, std::move(req));
  if (!reply_failed(ctx, resp))
    reply_json(ctx.res, 200, message_to_json(resp.gpu_history(), false));
}

void clear_gpu_fault(api_context& ctx) {
  v1::Request req;
  req.mutable_clear_fault()->set_machine(ctx.param("node"));
  req.mutable_clear_fault()->set_gpu(ctx.param("uuid"));
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  ctx.backend.refresh();
  reply_json(ctx.res, 200, message_to_json(resp.cleared(), false));
}

void get_xids(api_context& ctx) {
  v1::Request req;
  req.mutable_xid_policy();
  auto resp = ask_cluster(ctx, std::move(req));
  if (!reply_failed(ctx, resp))
    reply_json(ctx.res, 200, message_to_json(resp.xids(), false));
}

// -- metrics and the route list -----------------------------------------------

void get_metrics(api_context& ctx) {
  // Written straight from the view's text (tens of MiB at 40,000 GPUs): no
  // copy, and a provider with a length is never compressed by httplib.
  auto view = ctx.backend.view();
  if (ctx.req.has_param("machine")) {
    const auto& name = ctx.req.get_param_value("machine");
    if (view->machine(name) == nullptr) {
      reply_error(ctx.res, 404, "no_such_machine", "no machine named " + name);
      return;
    }
    ctx.res.status = 200;
    ctx.res.set_content(render_prometheus_metrics(*view, name),
                        "text/plain; version=0.0.4; charset=utf-8");
    return;
  }
  const auto& text = view->metrics();
  ctx.res.status = 200;
  ctx.res.set_content_provider(
    text.size(), "text/plain; version=0.0.4; charset=utf-8",
    [view](size_t offset, size_t length, httplib::DataSink& sink) {
      const auto& t = view->metrics();
      return sink.write(t.data() + offset, std::min(length, t.size() - offset));
    });
}

void get_openapi(api_context& ctx) {
  reply_json(ctx.res, 200, openapi_document(ctx.cfg));
}

const std::vector<api_route>& api_routes() {
  // Cluster routes are served under both prefixes (cluster_prefixes()).
  // Machines are `nodes` as the seeds write, and `machines` as astra does.
  static const std::vector<api_route> rows{
    {"GET", "/api/v1/openapi.json", false, get_openapi, "this document", "", "OpenAPI 3", ""},
    {"GET", "/metrics", false, get_metrics,
     "Prometheus metrics (dcgm-exporter names); ?machine=NAME for one machine's", "",
     "text/plain", "machine"},
    {"GET", "/nodes", true, list_nodes, "list machines (?limit, ?cursor, ?index&wait)", "",
     "MachineList", "limit,cursor,index,wait"},
    {"GET", "/nodes/{node}", true, get_node, "one machine", "", "MachineView", ""},
    {"POST", "/nodes/{node}/cordon", true, cordon_node, "cordon (admins)", "", "MachineView", ""},
    {"POST", "/nodes/{node}/uncordon", true, uncordon_node, "uncordon (admins)", "",
     "MachineView", ""},
    {"POST", "/nodes/{node}/maintenance", true, set_node_maintenance,
     "maintenance on (empty body) or {\"maintenance\":false} (admins)", "SetMaintenance",
     "MachineView", ""},
    {"PATCH", "/nodes/{node}/labels", true, set_node_labels,
     "set and remove labels (admins)", "SetLabels", "MachineView", ""},
    {"POST", "/nodes/{node}/labels", true, set_node_labels,
     "set and remove labels (admins)", "SetLabels", "MachineView", ""},
    {"PUT", "/nodes/{node}/data-location", true, set_node_data_location,
     "choose where the machine keeps data: {\"path\": \"/mnt/nvme0/astraeus\"} (admins)",
     "SetDataLocation", "MachineView", ""},
    {"DELETE", "/nodes/{node}", true, remove_node,
     "remove a Down or drained machine: its GPUs, record and identity (admins)", "",
     "MachineView", ""},
    {"POST", "/nodes/{node}/drain", true, drain_node,
     "cordon, then stop its workers at the deadline (admins)", "DrainMachine", "MachineView", ""},
    {"GET", "/nodes/{node}/gpus", true, list_node_gpus, "the machine's GPUs", "", "GpuList",
     "limit,cursor,index,wait"},
    {"GET", "/nodes/{node}/gpus/{uuid}", true, get_node_gpu, "one GPU", "", "GpuView", ""},
    {"GET", "/nodes/{node}/gpus/{uuid}/history", true, get_node_gpu_history,
     "the GPU's history, oldest first: raw for 1 h, 1-minute means to 6 h, 5-minute "
     "means to 24 h (?since=<unix ms>, ?max_points=N)", "", "GpuHistory", "since,max_points"},
    {"POST", "/nodes/{node}/gpus/{uuid}/clear-fault", true, clear_gpu_fault,
     "clear a latched fault on the connected machine (admins; 409 NOT_CONNECTED)", "",
     "ClearFaultResult", ""},
    {"GET", "/machines", true, list_nodes, "list machines", "", "MachineList",
     "limit,cursor,index,wait"},
    {"GET", "/machines/{node}", true, get_node, "one machine", "", "MachineView", ""},
    {"POST", "/machines/{node}/cordon", true, cordon_node, "cordon (admins)", "",
     "MachineView", ""},
    {"POST", "/machines/{node}/uncordon", true, uncordon_node, "uncordon (admins)", "",
     "MachineView", ""},
    {"POST", "/machines/{node}/maintenance", true, set_node_maintenance,
     "maintenance on or off (admins)", "SetMaintenance", "MachineView", ""},
    {"PATCH", "/machines/{node}/labels", true, set_node_labels, "labels (admins)",
     "SetLabels", "MachineView", ""},
    {"POST", "/machines/{node}/labels", true, set_node_labels, "labels (admins)",
     "SetLabels", "MachineView", ""},
    {"PUT", "/machines/{node}/data-location", true, set_node_data_location,
     "choose where the machine keeps data (admins)", "SetDataLocation", "MachineView", ""},
    {"DELETE", "/machines/{node}", true, remove_node,
     "remove a Down or drained machine (admins)", "", "MachineView", ""},
    {"POST", "/machines/{node}/drain", true, drain_node,
     "cordon, then stop its workers at the deadline (admins)", "DrainMachine", "MachineView", ""},
    {"GET", "/machines/{node}/gpus", true, list_node_gpus, "the machine's GPUs", "",
     "GpuList", "limit,cursor,index,wait"},
    {"GET", "/machines/{node}/gpus/{uuid}", true, get_node_gpu, "one GPU", "", "GpuView", ""},
    {"GET", "/machines/{node}/gpus/{uuid}/history", true, get_node_gpu_history,
     "the GPU's history (?since, ?max_points)", "", "GpuHistory", "since,max_points"},
    {"POST", "/machines/{node}/gpus/{uuid}/clear-fault", true, clear_gpu_fault,
     "clear a latched fault (admins)", "", "ClearFaultResult", ""},
    {"GET", "/gpus", true, list_gpus, "every GPU (?limit, ?cursor, ?index&wait)", "",
     "GpuList", "limit,cursor,index,wait"},
    {"GET", "/gpus/{uuid}", true, get_gpu, "one GPU", "", "GpuView", ""},
    {"GET", "/xids", true, get_xids, "the Xid policy in force", "", "XidPolicyTable", ""},
    {"POST", "/enrollment-tokens", true, create_enrollment_token,
     "a single-use join token and its install command (admins)", "CreateJoinToken",
     "JoinToken", ""},
    {"POST", "/runs", true, submit_run, "submit a run (the run spec as JSON)", "RunSpec",
     "Run", ""},
    {"GET", "/runs", true, list_runs, "every run, by name (?limit, ?cursor, ?workspace)", "",
     "RunList", "limit,cursor,workspace"},
    {"GET", "/runs/{run}", true, get_run,
     "one run (?workspace: of that workspace; none: the default, else the only one)", "",
     "Run", "workspace"},
    {"DELETE", "/runs/{run}", true, delete_run,
     "stop a run and free its GPUs (?workspace); its workers show Stopping until they end",
     "", "Run", "workspace"},
    {"GET", "/runs/{run}/logs", true, get_run_logs,
     "a worker's log (?worker, ?copy of an array run, ?offset, ?follow=true streams, "
     "?workspace)", "",
     "text/plain or LogChunk", "worker,copy,offset,follow,workspace"},
    {"GET", "/workspaces", true, list_workspaces, "every workspace", "", "WorkspaceList", ""},
    {"POST", "/workspaces", true, create_workspace, "create a workspace (admins)",
     "Workspace", "Workspace", ""},
    {"GET", "/enrollment-tokens", true, list_enrollment_tokens,
     "every join token, without secrets (admins)", "", "JoinTokenList", ""},
    {"GET", "/enrollment-tokens/{id}", true, get_enrollment_token,
     "a join token, without its secret (admins)", "", "JoinTokenRecord", ""},
    {"DELETE", "/enrollment-tokens/{id}", true, revoke_enrollment_token,
     "revoke an unused join token (admins)", "", "JoinTokenList", ""},
    {"GET", "/api-tokens", true, list_api_tokens, "every API token, without secrets (admins)",
     "", "ApiTokenList", ""},
    {"DELETE", "/workspaces/{name}", true, delete_workspace,
     "delete a workspace without live runs (admins)", "", "Workspace", ""},
    {"PUT", "/workspaces/{name}/grants", true, set_workspace_grants,
     "grant machine paths for Bind volumes and privileged work (admins; issue 16)",
     "SetWorkspaceGrants", "Workspace", ""},
    {"POST", "/api-tokens", true, create_api_token, "mint an API token (admins)",
     "CreateApiToken", "ApiToken", ""},
    {"GET", "/api-tokens/{id}", true, get_api_token, "an API token, without its secret (admins)",
     "", "ApiTokenRecord", ""},
    {"DELETE", "/api-tokens/{id}", true, revoke_api_token, "revoke an API token (admins)", "",
     "ApiToken", ""},
    {"GET", "/whoami", true, get_whoami, "the token's principal", "", "Principal", ""},
    {"GET", "/audit", true, list_audit, "the audit log, newest first (admins; ?limit)", "",
     "AuditList", "limit"},
    {"POST", "/validations", true, create_validation,
     "start a validation (admins): suite (acceptance when left out), pool or machine, note",
     "StartValidation",
     "Validation", ""},
    {"GET", "/validations", true, list_validations, "every validation, newest first", "",
     "ValidationList", ""},
    {"GET", "/validations/{id}", true, get_validation, "a validation: its state and steps", "",
     "Validation", ""},
    {"DELETE", "/validations/{id}", true, cancel_validation,
     "cancel a running validation (admins; ?reason): its steps not ended are Cancelled and "
     "their check runs removed; 409 once it has ended", "", "Validation", "reason"},
    {"GET", "/v1/validations/{id}", false, get_validation,
     "a validation: its state and steps", "", "Validation", ""},
    {"GET", "/topology", true, get_topology,
     "the fabrics and topology findings with their fixes (?pool; issue 12)", "",
     "TopologyReport", "pool"},
    {"GET", "/report", true, get_cluster_report, "the Cluster Report (?pool)", "",
     "ClusterReport", "pool"},
    {"GET", "/validation-policies", true, list_validation_policies,
     "the pools' validation policies", "", "ValidationPolicyList", ""},
    {"PUT", "/validation-policies/{pool}", true, set_validation_policy,
     "set a pool's validation policy (admins): require_acceptance, burn_in_seconds, "
     "dcgm_level, exclude_degraded_ports", "ValidationPolicy", "ValidationPolicy", ""},
    {"DELETE", "/validation-policies/{pool}", true, delete_validation_policy,
     "delete a pool's validation policy (admins)", "", "ValidationPolicy", ""},
  };
  return rows;
}

} // namespace astraeus::http
