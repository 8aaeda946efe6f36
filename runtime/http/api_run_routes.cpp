// The API's handlers for runs, tokens, workspaces, the audit log and
// validations, and the OpenAPI document.

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>

#include "messages/error.hpp"
#include "messages/json.hpp"
#include "messages/run_key.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/http/api_routes_internal.hpp"
#include "runtime/http/install_server.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::http {

namespace {

/// Answers `req`, writing `pick(resp)` as JSON with `status`; a Location of
/// `location(resp)` when that is not empty.
template <class Pick>
void reply_with(api_context& ctx, v1::Request req, int status, Pick pick,
                const std::string& location = {}) {
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  if (!location.empty())
    ctx.res.set_header("Location", location);
  reply_json(ctx.res, status, message_to_json(pick(resp), false));
}

} // namespace

void create_enrollment_token(api_context& ctx) {
  v1::CreateJoinToken body;
  if (!read_body(ctx, body, true))
    return;
  v1::Request req;
  *req.mutable_create_join_token() = body;
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  auto token = resp.join_token();
  // The seed's command: install.sh from this API, the gate as the client
  // would reach it (runtime/http/install_server.hpp).
  installer_site site;
  site.gate_address = ctx.cfg.gate_address;
  site.scheme = ctx.cfg.plain_http ? "http" : "https";
  site.advertise_url = ctx.cfg.advertise_url;
  const auto host = ctx.req.get_header_value("Host");
  install_site_info info;
  info.api_url = api_url_for_host(site, host);
  info.gate_address = token.controller_address().empty()
                        ? gate_address_for_host(ctx.cfg.gate_address, host)
                        : token.controller_address();
  info.organization = ctx.cfg.organization;
  info.curl_pin = ctx.cfg.curl_pin;
  token.set_install(install_script_command(token, info));
  // The gate the command names, as the client reaches it (never "").
  token.set_controller_address(info.gate_address);
  token.set_expires(rfc3339_utc(token.expires_unix_ms()));
  ctx.res.set_header("Location", ctx.prefix + "/enrollment-tokens/" + token.id());
  reply_json(ctx.res, 201, message_to_json(token, false));
}

// -- runs ---------------------------------------------------------------------

namespace {

/// Issue 13: `?workspace=W`: the run of that workspace (names are per
/// workspace); "" when not given (the default workspace's run, else the one
/// workspace's that has one).
std::string workspace_param(const api_context& ctx) {
  return ctx.req.has_param("workspace") ? ctx.req.get_param_value("workspace") : std::string{};
}

} // namespace

void submit_run(api_context& ctx) {
  // The run spec as astra reads it from a file: JSON is YAML, one parser.
  if (ctx.req.body.find_first_not_of(" \t\r\n") == std::string::npos) {
    reply_error(ctx.res, 400, "invalid_request",
                "body: empty; send the run spec as JSON, e.g. {\"name\":\"train\","
                "\"image\":\"busybox\",\"command\":[\"true\"]}");
    return;
  }
  if (!is_json_object(ctx.req.body)) {
    reply_error(ctx.res, 400, "invalid_request", "body: not a JSON object; send the run spec");
    return;
  }
  auto spec = parse_run_spec(ctx.req.body, "body");
  if (!spec) {
    reply_error(ctx.res, 400, "invalid_request", render_error(spec.error()));
    return;
  }
  auto name = spec->name();
  // Issue 13: names are per workspace; the Location names it.
  if (!spec->workspace().empty() && spec->workspace() != default_workspace)
    name += "?workspace=" + spec->workspace();
  v1::Request req;
  *req.mutable_submit_run()->mutable_spec() = std::move(*spec);
  reply_with(ctx, std::move(req), 201, [](const v1::Response& r) -> const v1::Run& { return r.run(); },
             ctx.prefix + "/runs/" + name);
}

namespace {

/// A run's place in GET /runs: its name, then its workspace ("" for the
/// default one), so two workspaces' runs of one name are two entries.
std::pair<std::string, std::string> run_list_position(const v1::RunSpec& spec) {
  auto ws = spec.workspace() == default_workspace ? std::string{} : spec.workspace();
  return {spec.name(), std::move(ws)};
}

/// The cursor of the entry at `at`: "NAME" in the default workspace,
/// "NAME,WORKSPACE" in another (',' is in no name).
std::string run_list_cursor(const std::pair<std::string, std::string>& at) {
  return at.second.empty() ? at.first : at.first + "," + at.second;
}

} // namespace

void list_runs(api_context& ctx) {
  // Pages as /nodes and /gpus do: ?limit=N (1-100000; none: all) and
  // ?cursor=<the X-Next-Cursor of the page before>, by run name and then
  // workspace: the page starts at the first run not before the cursor.
  auto limit = query_number(ctx, "limit", 1, 100000, 0);
  if (!limit)
    return;
  v1::Request req;
  req.mutable_list_runs()->set_workspace(workspace_param(ctx));
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  auto* runs = resp.mutable_runs()->mutable_runs();
  std::sort(runs->begin(), runs->end(), [](const v1::Run& a, const v1::Run& b) {
    return run_list_position(a.spec()) < run_list_position(b.spec());
  });
  std::pair<std::string, std::string> from;
  if (ctx.req.has_param("cursor")) {
    auto cursor = ctx.req.get_param_value("cursor");
    auto comma = cursor.find(',');
    from = {cursor.substr(0, comma),
            comma == std::string::npos ? std::string{} : cursor.substr(comma + 1)};
  }
  v1::RunList page;
  std::string next;
  for (const auto& r : *runs) {
    auto at = run_list_position(r.spec());
    if (at < from)
      continue;
    if (*limit != 0 && static_cast<size_t>(page.runs_size()) == *limit) {
      next = run_list_cursor(at);
      break;
    }
    *page.add_runs() = r;
  }
  if (!next.empty())
    ctx.res.set_header("X-Next-Cursor", next);
  reply_json(ctx.res, 200, message_to_json(page, false));
}

void get_run(api_context& ctx) {
  v1::Request req;
  req.mutable_get_run()->set_name(ctx.param("run"));
  req.mutable_get_run()->set_workspace(workspace_param(ctx));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::Run& { return r.run(); });
}

void delete_run(api_context& ctx) {
  v1::Request req;
  req.mutable_delete_run()->set_name(ctx.param("run"));
  req.mutable_delete_run()->set_workspace(workspace_param(ctx));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::Run& { return r.run(); });
}

namespace {

/// One piece of worker `worker`'s log of `run` from `offset`, asked as
/// `caller`; the Response as the cluster gave it.
v1::Response read_log(api_backend& backend, const v1::Principal& caller,
                      const std::string& workspace, const std::string& run, int32_t worker,
                      std::optional<int32_t> copy, uint64_t offset) {
  v1::Request req;
  auto* q = req.mutable_get_logs();
  q->set_workspace(workspace);
  q->set_run(run);
  q->set_worker(worker);
  if (copy)
    q->set_copy(*copy);
  q->set_offset(offset);
  *req.mutable_caller() = caller;
  return backend.call(std::move(req));
}

} // namespace

void get_run_logs(api_context& ctx) {
  auto worker = query_number(ctx, "worker", 0, INT32_MAX, 0);
  auto offset = worker ? query_number(ctx, "offset", 0, UINT64_MAX / 2, 0) : std::nullopt;
  if (!worker || !offset)
    return;
  // An array run's copy (?copy=N); without it, the lowest.
  std::optional<int32_t> copy;
  if (ctx.req.has_param("copy")) {
    auto n = query_number(ctx, "copy", 0, INT32_MAX, 0);
    if (!n)
      return;
    copy = static_cast<int32_t>(*n);
  }
  auto follow = ctx.req.get_param_value("follow");
  if (follow != "" && follow != "true" && follow != "1" && follow != "false" && follow != "0") {
    reply_error(ctx.res, 400, "invalid_request",
                "follow: '" + follow + "' is not true or false");
    return;
  }
  auto workspace = workspace_param(ctx);
  auto first = read_log(ctx.backend, ctx.caller, workspace, ctx.param("run"),
                        static_cast<int32_t>(*worker), copy, *offset);
  if (reply_failed(ctx, first))
    return;
  ctx.res.set_header("X-Astraeus-Worker", first.logs().worker());
  if (follow != "true" && follow != "1") {
    if (ctx.req.get_header_value("Accept").find("application/json") != std::string::npos) {
      reply_json(ctx.res, 200, message_to_json(first.logs(), false));
      return;
    }
    ctx.res.set_header("X-Next-Offset", std::to_string(first.logs().next_offset()));
    ctx.res.status = 200;
    ctx.res.set_content(first.logs().data(), "text/plain; charset=utf-8");
    return;
  }
  // Streamed: each piece as it comes, until the worker ends or the client
  // goes. The HTTP thread polls the agent; no actor waits on the socket.
  struct follow_state {
    v1::LogChunk pending;
    bool sent_pending = false;
  };
  auto st = std::make_shared<follow_state>();
  st->pending = first.logs();
  // The provider runs after this handler returned: it keeps copies.
  auto* backend = &ctx.backend;
  auto caller = ctx.caller;
  auto run = ctx.param("run");
  auto w = static_cast<int32_t>(*worker);
  ctx.res.set_chunked_content_provider(
    "text/plain; charset=utf-8",
    [st, backend, caller, workspace, run, w, copy](size_t, httplib::DataSink& sink) {
      if (!st->sent_pending) {
        st->sent_pending = true;
        const auto& d = st->pending.data();
        if (!d.empty() && !sink.write(d.data(), d.size()))
          return false;
        if (st->pending.finished()) {
          sink.done();
          return true;
        }
        return true;
      }
      if (!sink.is_writable())
        return false;
      auto next = read_log(*backend, caller, workspace, run, w, copy, st->pending.next_offset());
      if (next.has_error()) {
        sink.done();
        return true;
      }
      if (next.logs().data().empty() && !next.logs().finished())
        std::this_thread::sleep_for(std::chrono::milliseconds{500});
      st->pending = next.logs();
      st->sent_pending = false;
      return true;
    });
}

// -- workspaces, tokens, audit ------------------------------------------------

void list_workspaces(api_context& ctx) {
  v1::Request req;
  req.mutable_list_workspaces();
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::WorkspaceList& { return r.workspaces(); });
}

void create_workspace(api_context& ctx) {
  v1::Workspace body;
  if (!read_body(ctx, body, false))
    return;
  auto name = body.name();
  v1::Request req;
  *req.mutable_create_workspace()->mutable_workspace() = std::move(body);
  reply_with(ctx, std::move(req), 201,
             [](const v1::Response& r) -> const v1::Workspace& { return r.workspace(); },
             ctx.prefix + "/workspaces/" + name);
}

void create_api_token(api_context& ctx) {
  v1::CreateApiToken body;
  if (!read_body(ctx, body, false))
    return;
  v1::Request req;
  *req.mutable_create_api_token() = std::move(body);
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  ctx.res.set_header("Location", ctx.prefix + "/api-tokens/" + resp.api_token().id());
  reply_json(ctx.res, 201, message_to_json(resp.api_token(), false));
}

void revoke_api_token(api_context& ctx) {
  v1::Request req;
  req.mutable_revoke_api_token()->set_id(ctx.param("id"));
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  ctx.backend.forget_tokens();
  reply_json(ctx.res, 200, message_to_json(resp.api_token(), false));
}

void get_whoami(api_context& ctx) {
  v1::Request req;
  req.mutable_whoami();
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::Principal& { return r.principal(); });
}

void list_audit(api_context& ctx) {
  auto limit = query_number(ctx, "limit", 1, 100000, 100);
  if (!limit)
    return;
  v1::Request req;
  req.mutable_list_audit()->set_limit(static_cast<uint32_t>(*limit));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::AuditList& { return r.audit(); });
}

// -- validations (issue 21) ---------------------------------------------------

void create_validation(api_context& ctx) {
  v1::StartValidation body;
  if (!read_body(ctx, body, false))
    return;
  v1::Request req;
  *req.mutable_start_validation() = std::move(body);
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  ctx.res.set_header("Location", ctx.prefix + "/validations/" + resp.validation().id());
  reply_json(ctx.res, 201, message_to_json(resp.validation(), false));
}

void list_validations(api_context& ctx) {
  v1::Request req;
  req.mutable_list_validations();
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::ValidationList& { return r.validations(); });
}

void get_validation(api_context& ctx) {
  v1::Request req;
  req.mutable_get_validation()->set_id(ctx.param("id"));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::Validation& { return r.validation(); });
}

// `astra astraeus cancel ID`: the validation ends Cancelled, its check
// runs removed; the validation as it ended. `?reason=` is kept with it and
// in the audit log.
void cancel_validation(api_context& ctx) {
  v1::Request req;
  auto* body = req.mutable_cancel_validation();
  body->set_id(ctx.param("id"));
  if (ctx.req.has_param("reason"))
    body->set_reason(ctx.req.get_param_value("reason"));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::Validation& { return r.validation(); });
}

void get_cluster_report(api_context& ctx) {
  v1::Request req;
  if (ctx.req.has_param("pool"))
    req.mutable_get_report()->set_pool(ctx.req.get_param_value("pool"));
  else
    req.mutable_get_report();
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::ClusterReport& { return r.report(); });
}

// Issue 12: the fabrics and topology findings (the console's Topology).
void get_topology(api_context& ctx) {
  v1::Request req;
  req.mutable_get_topology()->set_pool(ctx.req.has_param("pool") ? ctx.req.get_param_value("pool")
                                                                  : std::string{});
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::TopologyReport& { return r.topology(); });
}

// The pools' validation policies (the console's Validation -> Policies).
void list_validation_policies(api_context& ctx) {
  v1::Request req;
  req.mutable_list_validation_policies();
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::ValidationPolicyList& {
               return r.validation_policies();
             });
}

// A PUT changes only the keys its body has; the pool's other fields keep
// their values (`{"burn_in_seconds": 120}` leaves require_acceptance).
void set_validation_policy(api_context& ctx) {
  v1::ValidationPolicy body;
  if (!read_body(ctx, body, false))
    return;
  const auto pool = ctx.param("pool");
  v1::Request ask;
  ask.mutable_list_validation_policies();
  auto listed = ask_cluster(ctx, std::move(ask));
  if (reply_failed(ctx, listed))
    return;
  v1::ValidationPolicy policy;
  for (const auto& p : listed.validation_policies().policies())
    if (p.pool() == pool)
      policy = p;
  if (auto err = merge_json_keys(ctx.req.body, policy, "body")) {
    reply_error(ctx.res, 400, "invalid_request", render_error(err));
    return;
  }
  policy.set_pool(pool);
  v1::Request req;
  *req.mutable_set_validation_policy()->mutable_policy() = std::move(policy);
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::ValidationPolicy& {
               return r.validation_policy();
             });
}

// A pool's policy goes (`astra astraeus policy delete POOL`).
void delete_validation_policy(api_context& ctx) {
  v1::Request req;
  req.mutable_delete_validation_policy()->set_pool(ctx.param("pool"));
  reply_with(ctx, std::move(req), 200,
             [](const v1::Response& r) -> const v1::ValidationPolicy& {
               return r.validation_policy();
             });
}

// -- OpenAPI ------------------------------------------------------------------

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

std::string openapi_document(const api_server_config& cfg) {
  // Paths in OpenAPI's template form, each with its methods.
  std::vector<std::pair<std::string, std::string>> paths;  // path -> operations
  auto add = [&](const std::string& path, const api_route& r) {
    std::string method = r.method;
    for (auto& ch : method)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string op = json_string(method) + ":{\"summary\":" + json_string(r.summary)
                     + ",\"responses\":{\"default\":{\"description\":"
                     + json_string(std::string{"astraeus.v1."} + r.answer
                                   + " or {\"code\",\"message\"}")
                     + "}}";
    // The query parameters it takes (any other is refused with 400).
    if (r.query != nullptr && *r.query != '\0') {
      op += ",\"parameters\":[";
      std::string_view left = r.query;
      for (bool first = true; !left.empty(); first = false) {
        auto comma = left.find(',');
        op += (first ? "" : ",") + std::string{"{\"name\":"}
              + json_string(std::string{left.substr(0, comma)})
              + ",\"in\":\"query\",\"schema\":{\"type\":\"string\"}}";
        left = comma == std::string_view::npos ? std::string_view{} : left.substr(comma + 1);
      }
      op += "]";
    }
    if (*r.body != '\0')
      op += ",\"requestBody\":{\"description\":" + json_string(std::string{"astraeus.v1."} + r.body
                                                                + " as JSON")
            + ",\"content\":{\"application/json\":{}}}";
    op += "}";
    for (auto& [p, ops] : paths)
      if (p == path) {
        ops += "," + op;
        return;
      }
    paths.emplace_back(path, op);
  };
  for (const auto& r : api_routes()) {
    if (!r.cluster_scoped) {
      add(r.path, r);
      continue;
    }
    for (const auto& prefix : cluster_prefixes())
      add(prefix + r.path, r);
  }
  std::string out = "{\"openapi\":\"3.0.3\",\"info\":{\"title\":\"Astraeus API\",\"version\":\"v1\","
                    "\"description\":"
                    + json_string("Organisation " + cfg.organization + ", cluster " + cfg.cluster
                                  + ". Objects are the protobuf JSON mapping of messages/astraeus.proto"
                                    " (package astraeus.v1). Errors: {\"code\",\"message\"}.")
                    + "},\"components\":{\"securitySchemes\":{\"bearer\":{\"type\":\"http\","
                      "\"scheme\":\"bearer\"}}},\"security\":[{\"bearer\":[]}],\"paths\":{";
  for (size_t i = 0; i < paths.size(); ++i)
    out += (i ? "," : "") + json_string(paths[i].first) + ":{" + paths[i].second + "}";
  return out + "}}";
}

} // namespace astraeus::http
