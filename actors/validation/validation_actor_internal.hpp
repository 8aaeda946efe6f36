#pragma once
/// @file
/// Private to the validation actor (validation_actor.cpp,
/// validation_pairs.cpp): what its pair steps share with its machine steps.

#include "actors/validation/validation_actor.hpp"

namespace astraeus::validation_detail {

/// The validation actor, as its functions see it.
using validation_self = validation_actor::stateful_pointer<validation_state>;

/// Stores the validation with sync and tells the owner.
void save(validation_self self);

/// A request to the cluster on the validation's behalf.
v1::Request validation_cluster_request();

/// The pairs' part of a poll (issue 12): once the machines' own checks are
/// finished, looks at the Running pair steps and starts the next round's
/// (each holds both machines' check slots; its server and client run as two
/// runs); when every pair is finished, judges them against the best pair
/// (pair_plan.hpp, judge_pairs) and tells the owner of the steps it changed.
void poll_pairs(validation_self self);

} // namespace astraeus::validation_detail
