#pragma once
/// @file
/// Private to the validations actor (validations_actor.cpp,
/// validations_requests.cpp): the functions its handlers are made of.

#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "actors/validation/validations_actor.hpp"

namespace astraeus::validation_detail {

/// The validations actor, as its handlers see it.
using self_ptr = validations_actor::stateful_pointer<validations_state>;

/// Called with the new validation or why it could not start.
using started_fn = std::function<void(caf::expected<v1::Validation>)>;
/// Called with the accepted machine or why it could not be accepted.
using accepted_fn = std::function<void(caf::expected<v1::MachineView>)>;

/// A request to the cluster on the validations' behalf (owner role).
v1::Request cluster_request();

/// Spawns the actor of `v` (`resumed`: after a restart).
void spawn_validation(self_ptr self, const v1::Validation& v, bool resumed);

/// Starts a validation: checks the suite and the machines (those of the
/// pool or the one machine, or those of `batch` when it is not empty; Up or
/// Accepting), stores it with sync, spawns its actor. Errors
/// (ec::invalid_request) name what was wrong.
void start_validation(self_ptr self, v1::StartValidation start, std::string trigger,
                      std::string created_by, started_fn done,
                      std::vector<std::string> batch = {});

/// Accepts `machine` in its pool (it passed, or an admin's `reason`).
/// `only_waiting` (an admin's `astra astraeus accept`): a machine that waits
/// for no acceptance (not Accepting, not installed with --accept, or
/// accepted already) is refused, ec::failed_precondition "machine gpu-01 is
/// not Accepting (it is Up): nothing to accept", and nothing changes.
void accept_machine(self_ptr self, const std::string& machine, const std::string& reason,
                    accepted_fn done, bool only_waiting = false);

/// Answers a validation request of the CLI or the API.
caf::result<v1::Response> answer(self_ptr self, const v1::Request& req);

/// The machine poll: the quick check of machines that came Up, the
/// acceptance their pool's policy asks for, and the installer's --accept
/// (one acceptance over a joining batch, `installer_delay` after its last
/// machine joined; trigger "installer").
void look_at_machines(self_ptr self);

/// An admin cleared a latched fault on a GPU of `machine`: when its latest
/// quick check failed and none is pending there, a quick check runs again
/// (trigger automatic; only with validation.quick_on_up). A new-user trial
/// kept a fail badge and a "GPU … has a latched fault" finding after the
/// GPU was replaced and its fault cleared.
void on_fault_cleared(self_ptr self, const std::string& machine);

/// The removed machines' part of the machine poll: each running validation
/// hears of its machines that `machines` (the cluster's list) lacks; it
/// makes sure they are gone and ends their steps.
void tell_removed(self_ptr self, const v1::MachineList& machines);

/// Issue 12, part of the machine poll: tells the scheduler every machine's
/// degraded RDMA ports (ib_port_exclusions over `machines`, the latest
/// pairs and the pools' policies) when they changed since it was last told,
/// and logs each machine whose list changed.
void tell_degraded_ports(self_ptr self, const v1::MachineList& machines);

/// The installer's --accept part of the machine poll, over `machines` (the
/// cluster's list).
void start_installer_batch(self_ptr self, const v1::MachineList& machines);

} // namespace astraeus::validation_detail
