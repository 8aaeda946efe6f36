#pragma once
/// @file
/// Private to the scheduler actor (not installed; included only by
/// `actors/scheduler/scheduler_*.cpp`): the functions its handlers are made
/// of, by concern:
/// - `scheduler_runs.cpp`: a run's life and its array copies (submit,
///   delete, complete, what a run holds and gives back);
/// - `scheduler_pass.cpp`: a schedule pass (GPU runs through the queue,
///   CPU-only runs by cores and memory) and the group commit;
/// - `scheduler_machines.cpp`: what machines tell it (snapshots, worker
///   statuses);
/// - `scheduler_time_limits.cpp`: time limits of runs and copies;
/// - `scheduler_gpu_faults.cpp`: a GPU that fails under a run (issue 17,
///   rule 8);
/// - `scheduler_restart.cpp`: loading the stored runs and re-adopting their
///   GPUs after a restart.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/error.hpp>

#include "actors/scheduler/scheduler_actor.hpp"

namespace astraeus::scheduler_detail {

/// The scheduler actor, as its handlers see it.
using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

// -- runs and their copies (scheduler_runs.cpp) ------------------------------

/// Seconds on the actor clock (virtual in tests): the queue's `now`.
int64_t clock_seconds(self_ptr self);

/// Whether a run is placed and not ended (Placed, Assigned, Down, Running,
/// Stopping).
bool live(const v1::Run& run);

/// Marks `run` for the group commit (scheduled once per burst).
void mark(self_ptr self, const std::string& run);

/// Marks `machine` for a new worker set after the group commit.
void mark_machine(self_ptr self, const std::string& machine);

/// The (machine, GPU id) pairs the workers of copy `copy` (-2: all) hold.
std::vector<std::pair<std::string, std::string>> held_gpu_ids(const v1::Run& run,
                                                              int32_t copy = -2);

/// Records which machines a live run has workers on (and forgets a run
/// that is no longer live); those machines get their new worker sets.
void index_run(self_ptr self, const v1::Run& run);

/// Whether a worker has ended (messages/worker_state.hpp, worker_ended).
bool worker_ended(const v1::WorkerAssignment& w);

/// Sets the run's end (Stopped or Failed), and that of each worker still
/// going on (a worker keeps the end its agent reported).
void set_run_state(v1::Run& run, run_state end);

/// The array copies of a run that have ended (every worker of the copy
/// ended): they hold nothing and are no longer on their machines.
std::set<int32_t> ended_copies(const v1::Run& run);

/// Releases the piecewise holds of a copy still re-adopting its GPUs.
void drop_restore(scheduler_state& st, const std::string& qname);

/// Adds (`sign` 1) or removes (-1) the CPU cores and memory the workers of
/// copy `copy` (-2: all but ended copies) ask for to their machines' use;
/// what the index's allocations do not hold (CPU-only workers, copies still
/// re-adopting their GPUs) also to the index's outside use.
void account(scheduler_state& st, const v1::Run& run, int sign, int32_t copy = -2);

/// Tells the placement index what machine `machine` uses outside its
/// allocations (`machine_facts::cpu_millis_outside`, `memory_outside`).
void push_outside_use(scheduler_state& st, const std::string& machine);

/// The cores and memory the workers of copy `copy` of `run` hold, by
/// machine in the index (for re-adopting them with the copy's GPUs).
std::vector<machine_use> copy_use(const scheduler_state& st, const v1::Run& run, int32_t copy);

/// Takes the use of copy `copy` of `run` out of its machines' outside use
/// (it was re-adopted: the index's allocation holds it now).
void outside_adopted(scheduler_state& st, const v1::Run& run, int32_t copy);

/// Releases whatever each copy of a run holds or takes it out of the queue.
void release_run(scheduler_state& st, const v1::Run& run);

/// Whether any copy of the run holds GPUs or is re-adopting them (a
/// CPU-only run: whether it is placed).
bool holds_gpus(const scheduler_state& st, const v1::Run& run);

/// Ends a run: releases its GPUs, sets its state, stores it.
void finish_run(self_ptr self, v1::Run& run, run_state state, const std::string& why);

/// The waiting reason a run shows: the engine's words, and for an array how
/// many copies still wait.
std::string waiting_reason_of(const scheduler_state& st, const v1::Run& run);

/// Marks copy `copy` of `run` placed: state, counters, its workers' use of
/// CPU and memory, and (for the first copy) the leader and MASTER_ADDR.
void copy_placed(scheduler_state& st, v1::Run& run, int32_t copy,
                 const std::string& leader_machine);

/// Gives back what copy `copy` of `run` holds (its GPUs, cores and memory,
/// its time limit) and tells its machines: the copy has ended.
void end_copy(self_ptr self, const v1::Run& run, int32_t copy);

/// Stops copy `copy` of `run` alone (its time limit, a GPU fault under
/// it, one of its workers failed or lost): gives back what it holds, its
/// workers still going on are Stopped, and the copy's end (`end`, `why`) is
/// kept in `Run.copy_ends`; once no copy goes on or waits, the run ends
/// (`settle_array`).
void stop_copy(self_ptr self, v1::Run& run, int32_t copy, run_state end,
               const std::string& why);

/// Keeps how copy `copy` of array run `run` ended (`Run.copy_ends`): `end`
/// is Stopped or Failed, `why` the words users read. A copy's first end
/// stays (a later report of its workers changes nothing).
void record_copy_end(v1::Run& run, int32_t copy, run_state end, const std::string& why);

/// What the copies of array run `run` say of it: {nullopt, ""} while a copy
/// goes on or waits (or the run has ended already); once every copy has
/// ended, {Failed, "1 of 3 copies failed: worker sweep[1]-0 Failed: exited
/// with code 3"} if one failed, else {Stopped, "completed: every worker
/// exited with code 0"} (or how many copies were stopped, and why). Copies
/// are independent, as Slurm's array tasks are (sbatch(1), --array).
std::pair<std::optional<run_state>, std::string> array_outcome(const scheduler_state& st,
                                                               const v1::Run& run);

/// Ends array run `run` when `array_outcome` says it has ended (state,
/// reason, index, marked for the group commit). Returns whether it ended.
bool settle_array(self_ptr self, v1::Run& run);

/// `ec::invalid_request`: "no run named NAME" ("... in workspace W" for a
/// reference that names one).
caf::error no_such_run(const std::string& ref);

/// Issue 13: the key of the run a request's reference (messages/run_key.hpp)
/// means: "<workspace>/<name>" that workspace's only; a bare name the
/// default workspace's, else the one run of that name in any workspace.
/// Errors: ec::invalid_request "no run named X[ in workspace W]", naming
/// the workspaces that have a run of that name when there are any.
caf::expected<std::string> find_run(const scheduler_state& st, const std::string& ref);

/// The runs as `scheduler_state::runs` keeps them, by key.
using run_map = name_map<v1::Run>;

/// `find_run`, answered with the run's entry in `scheduler_state::runs`
/// (valid until that entry is erased). Errors: `find_run`'s.
caf::expected<run_map::const_iterator> find_run_entry(const scheduler_state& st,
                                                      const std::string& ref);

/// Issue 23 item 6: the workers of `run` still Stopping, as messages name
/// them ("t-0 on gpu-01, t-1 on gpu-02", the first five and how many
/// more); empty when none is.
std::string stopping_workers(const v1::Run& run);

/// Forgets run `key` (erased from the store with the next flush).
void forget_run(self_ptr self, const std::string& key);

/// The Stopping workers on `machine` (of runs deleted, issue 23 item 6, or
/// ended by a drain, a stop, a failure) take the end its agent reports in
/// `statuses` (state, exit code, words), or Stopped when it no longer holds
/// them or when `statuses` is null (the machine is Down or removed: they are
/// not waited for). A deleted run with no worker Stopping any more is
/// forgotten `scheduler_config::deleted_run_retention` later (`arm_forget`).
/// Returns whether a worker ended (its holds were given back: a pass is due).
bool settle_stopping(self_ptr self, const std::string& machine,
                     const v1::WorkerStatuses* statuses);

/// Forgets deleted run `key` after `deleted_run_retention` (an
/// `atom::expire` to itself), unless a new run took its name meanwhile.
void arm_forget(self_ptr self, const std::string& key);

/// `atom::submit`: queues every copy of a new run, then a pass; answered
/// after the group commit. A deleted run of the same key is replaced (its
/// workers still stopping are no longer shown, but keep what they hold:
/// `displace_run`); any other run of that key refuses it
/// (ec::invalid_request).
caf::result<v1::Run> submit_run(self_ptr self, v1::RunSpec& spec);

/// `atom::remove` of the run reference `ref`: releases what the run holds
/// but what its workers still going on hold, then a pass; answered with its
/// last state after the group commit. A run with workers still going on (on
/// machines attached and not Down) or still Stopping is kept as `deleted`,
/// those workers Stopping (`settle_stopping`) and holding their GPUs, cores
/// and memory (`hold_stopping`); any other is forgotten at once. Errors: `find_run`'s; ec::invalid_request "run X is
/// already stopping: ..." for a run deleted before.
caf::result<v1::Run> remove_run(self_ptr self, const std::string& ref);

/// `atom::complete`: the run stopped; gives back what it holds.
void complete_run(self_ptr self, const std::string& name);

// -- workers told to stop (scheduler_stopping.cpp) ---------------------------

/// Ends `run` with `end` (set_run_state) and makes each of its workers that
/// was still going `Stopping` until its agent reports it ended, holding
/// what it holds meanwhile (`hold_stopping`); a worker whose agent cannot
/// report (its machine Down or detached) takes the run's end at once.
void end_run_workers(self_ptr self, v1::Run& run, run_state end);

/// Whether the agent of `machine` will say how its workers end: its
/// machine actor is attached and it is not Down.
bool agent_reports(const scheduler_state& st, const std::string& machine);

/// Worker `w` of `run` (recorded under `key`: its key, or a displaced
/// one) is Stopping since `since_unix_ms`: its GPUs, cores and memory stay
/// held (`stopping_hold`) until `release_stopping`. Held at once where its
/// machine is in the index, else as its snapshot lists them (restart).
void hold_stopping(scheduler_state& st, const std::string& key, const v1::Run& run,
                   const v1::WorkerAssignment& w, int64_t since_unix_ms);

/// Whether `status`, in a worker list its agent sent after applying worker
/// set `generation`, is of a new worker of the name of stopping worker
/// `status.worker()` of record `key`: it goes on (not Stopping, not ended)
/// though the agent applied a set without the stopping one, so that one has
/// ended (a run deleted and submitted again under its name).
bool replaced_by_new_worker(const scheduler_state& st, const std::string& key,
                            const v1::WorkerStatus& status, uint64_t generation);

/// Holds, for every stopping worker, the GPUs (and cores and memory) its
/// machine now lists that it does not hold yet (after a restart).
void take_stopping_holds(scheduler_state& st);

/// Worker `worker` of record `key` is no longer Stopping: gives back what it
/// held. False when it held nothing.
bool release_stopping(scheduler_state& st, const std::string& key, const std::string& worker);

/// Gives back what every stopping worker of record `key` held.
void release_record_holds(scheduler_state& st, const std::string& key);

/// The record of a run with workers stopping under `key`: in `runs`, else
/// in `displaced`; nullptr when neither has it.
const v1::Run* stopping_record(const scheduler_state& st, const std::string& key);
v1::Run* stopping_record(scheduler_state& st, const std::string& key);

/// Issue 23: deleted run `key`, with workers still Stopping, gives its name
/// to a new run: its record, stopping index and holds move to a key of its
/// own ("<key>~<n>", `scheduler_state::displaced`), stored under it.
void displace_run(self_ptr self, const std::string& key);

/// Indexes (and holds for) the `Stopping` workers of loaded run `run`,
/// stored under `key`.
void index_stopping(scheduler_state& st, const std::string& key, const v1::Run& run);

/// "long-0 of run long", at most five, then "and N more", for a refusal to
/// remove `machine`; empty when none is stopping there.
std::string stopping_workers_text(const scheduler_state& st, const std::string& machine);

/// Fills `scheduler_state::stopping_waits` after a queue pass: each GPU run
/// or copy waiting for GPUs (at most 32 a pass) that would be placed were
/// the stopping workers ended is named with what they hold in its way:
/// "waiting: gpu-01: 8 GPUs held by stopping workers of run train (ending
/// within 30 s)" (the stop grace left, from `scheduler_config::stop_grace`).
void note_stopping_waits(scheduler_state& st);

// -- schedule pass and group commit (scheduler_pass.cpp) ---------------------

/// One pass of the queue: placed runs get their workers and are marked for
/// the group commit; waiting runs get the engine's reason.
void schedule_pass(self_ptr self);

/// One pass without preempting validation checks (schedule_pass's parts).
void schedule_pass_once(self_ptr self);
bool preempt_for_waiting(self_ptr self);

/// The runs a pass placed a copy of, by name (sorted: they are marked in
/// that order), each with its record in `scheduler_state::runs` (a pass
/// erases no run, so the pointers hold through it).
using touched_runs = std::map<std::string, v1::Run*>;

/// Places the CPU-only runs and copies waiting, in submission order.
void place_cpu_runs(scheduler_state& st, touched_runs& touched,
                    std::vector<std::string>& started);

/// "; gpu-03 is Accepting (acceptance val-… runs there), gpu-04 is
/// cordoned": the machines with every label of `labels` (but the
/// scheduler's Accepting one) that take no new user work, and why, at most
/// three then "and N more" (scheduler_blockers.cpp); empty when none.
std::string cpu_blockers(const scheduler_state& st, const label_map& labels);

/// The worker set of `machine`: every worker of a live run placed there.
v1::WorkerOrders orders_for(scheduler_state& st, const std::string& machine);

/// Issue 12: gives GPU worker `w` of a run with `spec` its machine's
/// degraded RDMA ports (none when the run sets NCCL_IB_HCA itself: its value
/// wins on the agent).
void give_degraded_ports(const scheduler_state& st, const v1::RunSpec& spec,
                         v1::WorkerAssignment& w);

/// The group commit: one batch with sync for every run changed since the
/// last flush, then the answers, then the machines' new worker sets.
void flush(self_ptr self);

/// With `background_sync`: burst number `seq` is durable (`err` empty) or
/// failed. The bursts at the front that are done go out in order: answers
/// and worker sets; a failed one's requests fail with `err`, its runs and
/// machines are marked again (written with the next change), and so do the
/// bursts after it. Then the next burst, if any gathered.
void synced(self_ptr self, uint64_t seq, const caf::error& err);

// -- what machines say (scheduler_machines.cpp) ------------------------------

/// A `v1::SchedulerMachine` snapshot: the index, the machine's facts, its
/// workers Down when it is; then re-adoption and a pass.
void apply_snapshot(self_ptr self, v1::SchedulerMachine& m);

/// A machine's `v1::WorkerStatuses`: workers acknowledged, Running, ended,
/// lost; copies and runs that ended give back what they hold.
void apply_worker_statuses(self_ptr self, v1::WorkerStatuses& statuses);

// -- GPU faults under runs (scheduler_gpu_faults.cpp) -------------------------

/// Issue 17, rule 8: each GPU the snapshot `m` shows Faulty that a worker of
/// a live run holds is recorded on the worker (`gpu_faults`, once per GPU
/// and reason) and the run (`gpu_fault`), and logged; a run that asked for
/// `on_gpu_fault: stop` has that worker's gang (the run, or its array copy)
/// stopped and Fails with the fault as its reason.
void note_gpu_faults(self_ptr self, const v1::SchedulerMachine& m);
/// `astra machine remove` (issue 13): forgets machine `name` (index,
/// snapshot, facts, claims, its actor). Errors: ec::invalid_request naming
/// the runs with workers there ("stop them first").
caf::error forget_machine(self_ptr self, const std::string& name);

// -- time limits (scheduler_time_limits.cpp) ---------------------------------

/// Stops run or copy `qname` when its time limit, `seconds` from now, is
/// reached (an `atom::deadline` to itself, matched by token).
void arm_time_limit(self_ptr self, const std::string& qname, int64_t seconds);

/// Arms the time limits of the live runs loaded at start, counting the time
/// they have been placed (wall clock).
void arm_stored_time_limits(self_ptr self);

/// `atom::deadline`: the time limit of run or copy `qname` is reached
/// (ignored when `token` is stale).
void time_limit_reached(self_ptr self, const std::string& qname, uint64_t token);

// -- restart (scheduler_restart.cpp) -----------------------------------------

/// Loads every stored run: waiting copies queue again in submission order;
/// placed ones re-adopt their GPUs as their machines' snapshots arrive.
/// Errors: the store's, when the runs cannot be loaded.
caf::error load_runs(self_ptr self);

/// Holds, for each stopping worker (issue 23) and then each copy still
/// re-adopting, the GPUs its machines now list;
/// once all are there, holds them as one allocation and adopts the copy.
void restore_pass(self_ptr self);

} // namespace astraeus::scheduler_detail
