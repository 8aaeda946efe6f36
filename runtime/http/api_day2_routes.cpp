// The API's day-two routes (issue 13, item 6): remove and drain a machine,
// list and revoke enrollment (join) tokens, list API tokens, delete a
// workspace. Each is one cluster request, as the CLI's commands are.

#include "runtime/http/api_routes_internal.hpp"

#include "messages/json.hpp"

namespace astraeus::http {

namespace {

/// Answers `req` with `pick(resp)` as JSON (200); `refresh`: the answer
/// changed the machines the API's views show.
template <class Pick>
void answer(api_context& ctx, v1::Request req, Pick pick, bool refresh) {
  auto resp = ask_cluster(ctx, std::move(req));
  if (reply_failed(ctx, resp))
    return;
  if (refresh)
    ctx.backend.refresh();
  reply_json(ctx.res, 200, message_to_json(pick(resp), false));
}

} // namespace

void remove_node(api_context& ctx) {
  v1::Request req;
  req.mutable_remove_machine()->set_name(ctx.param("node"));
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::MachineView& { return r.machine(); }, true);
}

void drain_node(api_context& ctx) {
  // {"deadline_seconds": 3600}; an empty body stops its workers at once.
  v1::DrainMachine body;
  if (!read_body(ctx, body, true))
    return;
  v1::Request req;
  *req.mutable_drain_machine() = body;
  req.mutable_drain_machine()->set_name(ctx.param("node"));
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::MachineView& { return r.machine(); }, true);
}

void list_enrollment_tokens(api_context& ctx) {
  v1::Request req;
  req.mutable_list_join_tokens();
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::JoinTokenList& { return r.join_tokens(); },
         false);
}

void revoke_enrollment_token(api_context& ctx) {
  v1::Request req;
  req.mutable_revoke_join_token()->set_id(ctx.param("id"));
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::JoinTokenList& { return r.join_tokens(); },
         false);
}

namespace {

/// The token of `list` whose id is the path's {id}, as JSON (200), or 404
/// naming the id: what a 201's Location header points at.
template <class List>
void reply_token(api_context& ctx, const List& list, const char* kind) {
  const auto id = ctx.param("id");
  for (const auto& t : list.tokens())
    if (t.id() == id) {
      reply_json(ctx.res, 200, message_to_json(t, false));
      return;
    }
  reply_error(ctx.res, 404, "not_found", std::string{"no "} + kind + " has id '" + id + "'");
}

} // namespace

void get_enrollment_token(api_context& ctx) {
  v1::Request req;
  req.mutable_list_join_tokens();
  auto resp = ask_cluster(ctx, std::move(req));
  if (!reply_failed(ctx, resp))
    reply_token(ctx, resp.join_tokens(), "join token");
}

void get_api_token(api_context& ctx) {
  v1::Request req;
  req.mutable_list_api_tokens();
  auto resp = ask_cluster(ctx, std::move(req));
  if (!reply_failed(ctx, resp))
    reply_token(ctx, resp.api_tokens(), "API token");
}

void list_api_tokens(api_context& ctx) {
  v1::Request req;
  req.mutable_list_api_tokens();
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::ApiTokenList& { return r.api_tokens(); },
         false);
}

void delete_workspace(api_context& ctx) {
  v1::Request req;
  req.mutable_delete_workspace()->set_name(ctx.param("name"));
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::Workspace& { return r.workspace(); }, false);
}

void set_workspace_grants(api_context& ctx) {
  v1::SetWorkspaceGrants body;
  if (!read_body(ctx, body, false))
    return;
  v1::Request req;
  *req.mutable_set_workspace_grants() = std::move(body);
  req.mutable_set_workspace_grants()->set_name(ctx.param("name"));
  answer(ctx, std::move(req),
         [](const v1::Response& r) -> const v1::Workspace& { return r.workspace(); }, false);
}

} // namespace astraeus::http
