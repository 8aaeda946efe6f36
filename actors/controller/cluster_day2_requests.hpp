#pragma once
/// @file
/// The cluster's day-two requests (issue 13, item 6), rows of the request
/// table (actors/controller/cluster_requests.cpp): removing and draining a
/// machine, listing and revoking join tokens, listing API tokens, deleting
/// a workspace, a GPU's history. Each answers a `v1::Response` as the table's handlers do;
/// the actions that change something are audited with their result.

#include "actors/controller/cluster_requests.hpp"

namespace astraeus::day2 {

/// `astra machine remove NAME`: only a Down machine or one whose drain is
/// done, and only when no run has workers there. Its record and identity
/// leave the store in one write (sync), the scheduler forgets its GPUs, its
/// actor stops; its agent must enrol again with a new join token. Answers
/// the machine's last view. Errors: ec::no_such_machine; ec::invalid_request
/// saying why not ("machine gpu-01 is Up: drain it first").
caf::result<v1::Response> remove_machine(const cluster_request& r);

/// `astra drain NAME [--deadline 1h]`: cordons it, stops its workers at the
/// deadline. Answers the machine. Errors: ec::no_such_machine,
/// ec::store_failure.
caf::result<v1::Response> drain_machine(const cluster_request& r);

/// Issue 20: `astra machine data-location NAME PATH` (admins): the machine's
/// answer (its view), audited as "set data location" with the path; a bad
/// path is refused naming it (ec::invalid_request).
caf::result<v1::Response> set_data_location(const cluster_request& r);

/// `astra tokens list`: every join token, without hashes.
caf::result<v1::Response> list_join_tokens(const cluster_request& r);

/// `astra tokens revoke ID`: an unused join token admits nobody any more.
caf::result<v1::Response> revoke_join_token(const cluster_request& r);

/// `astra api-tokens list`: every API token, without hashes.
caf::result<v1::Response> list_api_tokens(const cluster_request& r);

/// `astra workspace delete NAME`: only without live runs in it; never the
/// default workspace. Answers the workspace deleted.
caf::result<v1::Response> delete_workspace(const cluster_request& r);

/// Issue 16: `astra workspace grant NAME [--path P]... [--remove-path P]...
/// [--privileged | --no-privileged]` (admins): the machine paths a Bind
/// volume of the workspace's runs may mount (each path and what is under
/// it), and whether its runs may ask for privileged work
/// (`security_context.ipc_mode: host`). Stored with sync, audited as "grant
/// workspace" with what changed; answers the workspace. Runs already
/// submitted keep what they were admitted with. Errors (ec::invalid_request):
/// an unknown workspace, the default one (it may bind any path already), a
/// path that is not absolute or holds ".." or is "/", nothing to change;
/// ec::store_failure when the write fails (nothing changes).
caf::result<v1::Response> set_workspace_grants(const cluster_request& r);

/// `astra gpu show MACHINE GPU` and the API's GPU history (issue 19): the
/// GPU's history from the GPU history actor, oldest first. Errors:
/// ec::no_such_machine; ec::invalid_request when no GPU is named, when the
/// history keeps nothing of it ("machine M has no GPU G in its history"),
/// or when this controller keeps no history.
caf::result<v1::Response> get_gpu_history(const cluster_request& r);

} // namespace astraeus::day2
