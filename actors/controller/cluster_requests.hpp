#pragma once
/// @file
/// The cluster's request table: one row per `v1::Request` body kind saying
/// the least role that may send it, the action its audit records name, and
/// the function that answers it. The cluster actor's request handler checks
/// the role, then calls the row's handler (actors/controller/cluster_actor.cpp).
/// A body kind without a row is refused (ec::invalid_request) and needs an
/// admin; a unit test fails when a kind of the proto has no row.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/result.hpp>

#include "actors/controller/cluster_actor.hpp"
#include "runtime/gate/tokens.hpp"

namespace astraeus {

/// The cluster actor's self pointer, as handlers receive it.
using cluster_ptr = cluster_actor::stateful_pointer<cluster_state>;

struct cluster_request_row;

/// One request being answered: what every handler of the table works with.
struct cluster_request {
  /// The cluster actor; handlers run inside its request handler.
  cluster_ptr self;
  /// The request as the gate passed it (its `caller` set by the gate).
  const v1::Request& req;
  /// The row that matched `req`'s body.
  const cluster_request_row& row;
  /// `req.id()`, echoed in every Response.
  uint64_t id;
  /// How long a machine actor or the scheduler is waited for.
  caf::timespan timeout;

  /// Who sent the request (empty when the controller checks no tokens).
  const v1::Principal& caller() const {
    return req.caller();
  }
  /// The action this request's audit records name (the row's audit name).
  std::string action() const;
  /// Keeps an audit record of this request under `action()`.
  void audit(const std::string& target, const std::string& result) const;
  /// A Response for this request carrying `err`.
  v1::Response error(const caf::error& err) const;
  /// An empty Response for this request (its id set).
  v1::Response response() const;
};

/// Answers one request: a Response now, or a promise delivered later.
using cluster_request_handler = caf::result<v1::Response> (*)(const cluster_request&);

/// The action an audit record names for a request, e.g. "cordon" or
/// "uncordon" (some depend on the body).
using cluster_audit_name = const char* (*)(const v1::Request&);

/// One row of the request table.
struct cluster_request_row {
  /// The request body this row answers.
  v1::Request::BodyCase kind;
  /// The least role that may send it (checked only when the controller
  /// keeps tokens). A refusal is audited unless the least role is member.
  role minimum;
  /// The action its audit records name; null: the request is not audited
  /// when answered (reads).
  cluster_audit_name audit_name;
  /// The function that answers it.
  cluster_request_handler handler;
};

/// Every row, one per request body kind, in the proto's order.
const std::vector<cluster_request_row>& cluster_request_table();

/// The row for `kind`; null when this build has none (BODY_NOT_SET, or a
/// body newer than the controller).
const cluster_request_row* find_cluster_request(v1::Request::BodyCase kind);

/// The least role that may send `req` (runtime/gate/tokens.hpp), from its
/// row: reads, runs and `whoami` need a member; cordon, labels,
/// maintenance, clearing faults, workspaces, tokens and the audit log an
/// admin; a request body this build has no row for an admin too.
role required_role(const v1::Request& req);

/// Answers `req` in the cluster actor `self`: checks the caller's role
/// (refusing with ec::unauthenticated or ec::permission_denied, audited for
/// admin requests), then runs the row's handler. A body without a row gets
/// ec::invalid_request ("request carries no known body").
caf::result<v1::Response> answer_cluster_request(cluster_ptr self,
                                                 const v1::Request& req);

/// A Response for request `id` carrying `err`: its code is the astraeus
/// error code's name ("no_such_machine"), or the error category's for
/// other errors; its message the rendered error.
v1::Response error_response(uint64_t id, const caf::error& err);

/// A run as users are shown it (submit, get, delete and list answers, and
/// so the API, the console and the CLI): without its packed code (`--code`,
/// up to 512 KiB) and, `in_list`, without its config files' contents, so
/// that answers stay within one frame; each worker's `assigned_gpu_ids`
/// (the seed's name, seeds/inside-a-worker.md) filled from its `gpu_ids`,
/// which is all the scheduler keeps.
void for_display(v1::Run& run, bool in_list);

/// Keeps an audit record (who, what, when, result) in the store with sync,
/// and logs it. `who` empty: the record names "cli". A store failure is
/// logged, never returned.
void audit(cluster_ptr self, const v1::Principal& who, const std::string& action,
           const std::string& target, const std::string& result);

} // namespace astraeus
