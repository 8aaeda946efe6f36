#pragma once
/// @file
/// Private to the validation actor (validation_actor.cpp,
/// validation_pairs.cpp, validation_all_reduce.cpp): what its pair and
/// all-reduce steps share with its machine steps and with each other.

#include <functional>
#include <string>
#include <vector>

#include "actors/validation/validation_actor.hpp"

namespace astraeus::validation_detail {

/// The validation actor, as its functions see it.
using validation_self = validation_actor::stateful_pointer<validation_state>;

/// Stores the validation with sync and tells the owner; nothing once it
/// was cancelled (its cancelled copy is the last one kept).
void save(validation_self self);
/// Submits `spec` as a check's run and hands the run to `ok`, or why it
/// was refused to `failed`. Once the validation is cancelled nothing more
/// is submitted, and a run whose submit is answered after the cancel is
/// removed at once; neither callback runs then.
void submit_run(validation_self self, v1::RunSpec spec, std::function<void(v1::Run&)> ok,
                std::function<void(caf::error&)> failed);

/// A request to the cluster on the validation's behalf.
v1::Request validation_cluster_request();

/// Marks every machine step `index` holds (validation_plan.hpp,
/// step_machines) busy (a request in flight) or no longer.
void mark_busy(validation_self self, int index, bool busy);

/// Gives the check slot of `machine` back to the owner.
void give_back_slot(validation_self self, const std::string& machine);

/// Removes the run named `name` (the other runs of a step that ended);
/// errors are ignored (it may be gone already).
void remove_run(validation_self self, const std::string& name);

/// The run of step `index` was found: a step resumed after a controller
/// restart keeps its `restarted` words (its run went on).
void run_seen(validation_self self, int index);

/// The run of step `index` is gone (`why`): a step resumed after a
/// controller restart says in `restarted` that it runs again, words kept
/// through its next attempt.
void run_gone(validation_self self, int index, const std::string& why);

/// Step `index`'s first run `run` was submitted: the step is Running on it
/// (reason cleared, started now), no longer busy, and stored.
void mark_submitted(validation_self self, int index, const v1::Run& run);

/// Gets run `name` of Running step `index` and hands it to `then`; a step
/// no longer Running is let be, a run deleted or not found puts the step
/// back in the queue (group_step_went_away).
void get_step_run(validation_self self, int index, const std::string& name,
                  std::function<void(v1::Run&)> then);

/// Watches the first run `name` of step `index` (a pair's server, an
/// all-reduce's rank 0; `what` names it) while the others wait for it to be
/// placed: placed (it has the address of its machine) -> `placed`; ended
/// having given way to real work -> the step is Yielded, `gave_way`; ended
/// otherwise -> `ended_early` with "WHAT ended (STATE) before BEFORE: why";
/// else it waits.
void watch_first_run(validation_self self, int index, const std::string& name,
                     const std::string& what, const std::string& before,
                     std::function<void(const v1::Run&)> placed,
                     std::function<void(const std::string&)> ended_early,
                     std::function<void()> gave_way);

/// Asks the owner for the slot of each of `machines` in turn (from `next`)
/// for step `index`, then runs `then`. A refusal gives back the slots
/// granted so far and becomes the step's reason (it waits); a lost answer
/// gives them back too.
void with_slots(validation_self self, int index, std::vector<std::string> machines,
                std::function<void()> then, size_t next = 0);

/// A step over several machines (a pair, an all-reduce) ended (Done,
/// Failed or Yielded): logged with `label`, the owner hears of it (unless
/// it yielded), every slot it held is given back, it is stored.
void group_step_ended(validation_self self, int index, const std::string& label);

/// A run of step `index` is gone (deleted by hand, `why`): the step is
/// queued again, its other runs removed, its slots given back.
void group_step_went_away(validation_self self, int index, const std::string& why);

/// The pairs' part of a poll (issue 12): once the machines' own checks are
/// finished, looks at the Running pair steps and starts the next round's
/// (each holds both machines' check slots; its server and client run as two
/// runs); when every pair is finished, judges them against the best pair
/// (pair_plan.hpp, judge_pairs) and tells the owner of the steps it changed.
void poll_pairs(validation_self self);

/// The all-reduce's part of a poll (issue 12), once every other step is
/// finished: looks at the Running all-reduce step, or starts the next group
/// (all_reduce_plan.hpp, startable_all_reduce): it holds every machine's
/// slot of its group, runs rank 0, then once that is placed the other ranks
/// naming rank 0's address, and judges rank 0's result against the bus
/// bandwidth the group's rails should give.
void poll_all_reduce(validation_self self);

} // namespace astraeus::validation_detail
