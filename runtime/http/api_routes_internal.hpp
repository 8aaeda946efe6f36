#pragma once
/// @file
/// The API's route table and reply helpers, shared by api_server.cpp (the
/// dispatcher), api_routes.cpp and api_node_routes.cpp (the handlers) and
/// api_openapi.cpp. Internal: not installed.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <httplib.h>

#include <caf/error.hpp>

#include "messages/api_error.hpp"
#include "messages/astraeus.pb.h"
#include "runtime/http/api_server.hpp"

namespace astraeus::http {

/// One request being answered.
struct api_context {
  const httplib::Request& req;  ///< the HTTP request
  httplib::Response& res;       ///< the answer being written
  /// Path parameters by name ("node", "uuid", ...), as matched.
  std::vector<std::pair<std::string, std::string>> params;
  v1::Principal caller;         ///< who the token says (empty on open routes)
  const api_server_config& cfg; ///< the server's settings
  api_backend& backend;         ///< the controller
  /// The path parameter `name` (empty when absent).
  const std::string& param(const char* name) const;
  /// The path of this cluster's routes as the client used it
  /// ("/api/v1/orgs/acme/clusters/fra-1"), for Location headers.
  std::string prefix;
};

/// Answers one route.
using api_handler = void (*)(api_context&);

/// One row of the route table.
struct api_route {
  const char* method;    ///< GET, POST, PUT, PATCH, DELETE
  const char* path;      ///< "/nodes/{node}"; under the cluster's prefixes when scoped
  bool cluster_scoped;   ///< served under both cluster prefixes
  api_handler handler;   ///< the handler
  const char* summary;   ///< one line for openapi.json
  const char* body;      ///< the request body's message ("" when none)
  const char* answer;    ///< the answer's message or shape
  /// The query parameters it takes, comma-separated ("reason"); "" takes
  /// none; every route of the table declares its own. nullptr: not checked.
  /// A parameter it does not take is 400, named, before anything is done (a
  /// typo in `?resaon=` cancelled without the reason, `?limt=` listed
  /// everything, `POST /runs?workspace=` submitted to the default
  /// workspace). openapi.json lists them as the operation's parameters.
  const char* query = nullptr;
};

/// Every route (api_routes.cpp).
const std::vector<api_route>& api_routes();

/// Writes `json` with `status`.
void reply_json(httplib::Response& res, int status, std::string json);
/// Writes {"code","message"} with `status`.
void reply_error(httplib::Response& res, int status, const std::string& code,
                 const std::string& message);
/// Writes an Astraeus error with the status its code means.
void reply_error(httplib::Response& res, const caf::error& err);

/// The OpenAPI 3 document of `routes` (api_openapi.cpp).
std::string openapi_document(const api_server_config& cfg);

/// The two prefixes cluster routes are served under, with {org} and
/// {cluster} placeholders.
const std::vector<std::string>& cluster_prefixes();

// -- shared by the handlers ---------------------------------------------------

/// Sends `req` as the context's caller through the cluster's request table.
v1::Response ask_cluster(api_context& ctx, v1::Request req);
/// Writes the error of `resp` and returns true when it carries one.
bool reply_failed(api_context& ctx, const v1::Response& resp);
/// Whether `body` is a JSON object (its first non-blank character is '{').
bool is_json_object(const std::string& body);
/// Parses the body as JSON into `out`; an empty body is an empty message
/// when `empty_ok`. Writes a 400 naming the problem and returns false when it
/// does not parse.
bool read_body(api_context& ctx, google::protobuf::Message& out, bool empty_ok);
/// The query parameter `name` as a whole number in [lo, hi], `fallback` when
/// absent; nullopt after writing a 400 naming it.
std::optional<uint64_t> query_number(api_context& ctx, const char* name, uint64_t lo,
                                     uint64_t hi, uint64_t fallback);

// -- handlers (api_routes.cpp: machines, GPUs, metrics; api_run_routes.cpp:
// runs, tokens, workspaces, audit, validations) --------------------------------

void list_nodes(api_context& ctx);
void get_node(api_context& ctx);
void cordon_node(api_context& ctx);
void uncordon_node(api_context& ctx);
void set_node_maintenance(api_context& ctx);
void set_node_labels(api_context& ctx);
void list_node_gpus(api_context& ctx);
void get_node_gpu(api_context& ctx);
void list_gpus(api_context& ctx);
void get_gpu(api_context& ctx);
void clear_gpu_fault(api_context& ctx);
void get_node_gpu_history(api_context& ctx);
void get_metrics(api_context& ctx);
void get_openapi(api_context& ctx);
void get_xids(api_context& ctx);
void create_enrollment_token(api_context& ctx);
void submit_run(api_context& ctx);
void list_runs(api_context& ctx);
void get_run(api_context& ctx);
void delete_run(api_context& ctx);
void get_run_logs(api_context& ctx);
void list_workspaces(api_context& ctx);
void create_workspace(api_context& ctx);
void create_api_token(api_context& ctx);
void revoke_api_token(api_context& ctx);
void get_whoami(api_context& ctx);
void list_audit(api_context& ctx);
void create_validation(api_context& ctx);
void get_validation(api_context& ctx);
void list_validations(api_context& ctx);
/// DELETE /validations/{id}[?reason=]: cancels a Running validation
/// (admins); 409 when it has ended, 404 when no such validation.
void cancel_validation(api_context& ctx);
void get_cluster_report(api_context& ctx);
/// GET /topology[?pool=P] (issue 12): the TopologyReport.
void get_topology(api_context& ctx);
void list_validation_policies(api_context& ctx);
void set_validation_policy(api_context& ctx);
/// DELETE /validation-policies/{pool}: the pool's policy goes (admins).
void delete_validation_policy(api_context& ctx);
// issue 20 (installer): an admin chooses a machine's data location.
void set_node_data_location(api_context& ctx);
// issue 13 (cli): day-two routes (runtime/http/api_day2_routes.cpp).
void remove_node(api_context& ctx);
void drain_node(api_context& ctx);
void list_enrollment_tokens(api_context& ctx);
void revoke_enrollment_token(api_context& ctx);
void list_api_tokens(api_context& ctx);
/// GET /enrollment-tokens/{id} and /api-tokens/{id} (admins): the token
/// without its secret, where a 201's Location points; 404 `NOT_FOUND`
/// "no join token has id 'X'" for one not there.
void get_enrollment_token(api_context& ctx);
void get_api_token(api_context& ctx);
void delete_workspace(api_context& ctx);
/// PUT /workspaces/{name}/grants `{"add_bind_paths":["/data"],
/// "remove_bind_paths":[],"allow_privileged":true}` (issue 16, admins): the
/// workspace as it is now (200).
void set_workspace_grants(api_context& ctx);

} // namespace astraeus::http
