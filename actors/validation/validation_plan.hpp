#pragma once
/// @file
/// The logic of a validation, without actors (so it is tested directly):
/// suites and their checks, the steps per (machine, check), what a step's
/// run turns into, the verdicts of machines and of the whole validation,
/// the command line of a check and the parsing of its JSON result.
/// Source: shared/seeds/bring-up-a-gpu-cluster.md (steps 2-4, 6),
/// shared/DESIGN.md ("Validation"), issue 21.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"

namespace astraeus::validation {

/// Step states, as stored and shown.
inline constexpr const char* queued = "Queued";
inline constexpr const char* running = "Running";
/// Gave way to real work; queued again (never failed for it).
inline constexpr const char* yielded = "Yielded";
inline constexpr const char* done = "Done";
/// The check could not run, or printed no usable result.
inline constexpr const char* failed = "Failed";
/// Its validation was cancelled before it ended (no verdict).
inline constexpr const char* cancelled = "Cancelled";

/// The checks of `suite`, in the order they run on a machine:
/// acceptance = quick, dcgm, burn, copies, disk; quick, dcgm, burn, copies
/// and disk alone. Empty for any other word.
std::vector<std::string> checks_of(const std::string& suite);

/// Every suite's name, for error messages ("acceptance, quick, ...").
std::string suite_names();

/// Whether `suite` is one: it has checks of its own (checks_of) or runs the
/// pairs ("network": the pairs alone, issue 12).
bool known_suite(const std::string& suite);

/// Checks what a validation or a pool's policy is given, before anything
/// is stored: a burn-in of at most 7 days (`burn_in_seconds`, 0: the
/// default), a data folder (`data_dir`, empty: the machine's own) that is
/// an absolute path as `astra machine data-location` wants it. Errors:
/// ec::invalid_request naming the field and what is wrong
/// ("data_dir 'relative' is not an absolute path (it must start with /)").
caf::error check_settings(uint64_t burn_in_seconds, const std::string& data_dir);

/// The key a step's latest result is kept under: (machine, check); a pair
/// step's (its machine, "pair/<peer>"), so every pair keeps its own; an
/// all-reduce step's (its first machine, "allreduce/<group size>").
std::pair<std::string, std::string> latest_key(const v1::ValidationStep& step);

/// "val-YYYYMMDD-xxxxxx": the date of `unix_ms` (UTC) and 6 hex digits of
/// `random`.
std::string make_id(int64_t unix_ms, uint64_t random);

/// A new validation (state Running) with one Queued step per machine and
/// check of its suite, then (acceptance, network) one per pair of machines
/// (pair_plan.hpp). `machines` must be non-empty and `checks_of(suite)`
/// too (the caller checked).
v1::Validation make_validation(const std::string& id, const v1::StartValidation& start,
                               const std::vector<std::string>& machines,
                               const std::string& trigger, int64_t now_unix_ms);

/// After a controller restart: the checks' runs outlive the controller (the
/// scheduler keeps them and re-adopts their workers), so every Running step
/// stays Running and its run is waited for, `restarted` saying so
/// (restarted_kept); a 7-day burn-in survives an upgrade. An all-reduce step
/// is the exception: what it is judged against was kept only in memory, so
/// it is Queued again (it runs again, `restarted` and its reason saying
/// why) keeping its run name. Returns the runs to remove: those of the
/// all-reduce steps queued again.
std::vector<std::string> resume(v1::Validation& v);

/// The machines whose check slots `v` holds after resume(): those of its
/// Running steps (step_machines, each once), so that no other check is
/// granted a machine whose check went on through the restart.
std::vector<std::string> held_machines(const v1::Validation& v);

/// `restarted` of a step whose run went on through a controller restart:
/// "the controller restarted while it ran; its run RUN went on and was
/// waited for".
std::string restarted_kept(const std::string& run);

/// `restarted` of a step whose run was gone after a controller restart:
/// "the controller restarted while it ran and its run RUN was gone
/// (WHY): it ran again".
std::string restarted_gone(const std::string& run, const std::string& why);

/// The machines a step holds while it runs: its machine, a pair's peer, an
/// all-reduce's group (each once, in that order).
std::vector<std::string> step_machines(const v1::ValidationStep& step);

/// Whether `step` runs on `machine` (step_machines).
bool involves(const v1::ValidationStep& step, const std::string& machine);

/// The runs a Running step may have submitted at its attempt: its run, a
/// pair's server, an all-reduce's every rank.
std::vector<std::string> step_runs(const v1::Validation& v, int index);

/// Whether `machine` has a Running step in `v` (a pair's peer and an
/// all-reduce's group included).
bool has_running(const v1::Validation& v, const std::string& machine);

/// The index of the next step to start on `machine`: its first Queued or
/// Yielded step that is not a pair step (those start by round:
/// startable_pairs; nor an all-reduce step: startable_all_reduce); nullopt
/// when none (or one runs there already).
std::optional<int> next_step(const v1::Validation& v, const std::string& machine);

/// The run name of attempt `attempt` of step `index`:
/// "<id>-<machine>-<check>-<attempt>", cut to 63 characters.
std::string run_name(const v1::Validation& v, int index, uint32_t attempt);

/// `name` made a run name: characters other than letters, digits and '-'
/// become '-', cut to its last 63 characters, no leading '-'.
std::string clean_run_name(std::string name);

/// The run spec of a check named `name` running `command` as a host
/// process holding `gpus` GPUs, pinned to `machine`, at the lowest
/// priority, its last line kept as the result.
v1::RunSpec check_spec(const v1::Validation& v, const std::string& name,
                       const std::string& machine, const std::vector<std::string>& command,
                       uint32_t gpus);

/// The run spec of a step: `program <check> --json [options]` as a host
/// process holding every GPU of the machine (`gpus`), pinned to the machine,
/// at the lowest priority, its last line kept as the result.
v1::RunSpec run_spec(const v1::Validation& v, int index, uint32_t gpus,
                     const std::string& program);

/// The GPUs of a machine a check can have (GPUs a check runs on): `total`
/// its GPUs, `count` those no Foreign use, latched fault or set-aside keeps
/// from every run, and `note` naming the others with why ("runs on 7 of 8
/// GPUs: GPU-3 is Foreign (…)"; with none left, "none of gpu-03's 8 GPUs can
/// be had: …"); "" when all can be had.
struct usable_gpus_t {
  uint32_t total = 0;
  uint32_t count = 0;
  std::string note;
};

/// What a check on the machine of `view` can have, from its GPUs' health in
/// `gpus` (the controller's GPU list of that machine) and the scheduler's
/// set-aside GPUs in `view`.
usable_gpus_t usable_gpus(const v1::MachineView& view, const v1::GpuList& gpus);

/// The disk check's folder on the machine of `view`: the validation's
/// data_dir when it names one, else the machine's data location (issue 20);
/// "" = none chosen (the step is skipped: "no data location chosen: astra
/// machine data-location NAME PATH").
std::string disk_folder(const v1::Validation& v, const v1::MachineView& view);

/// A machine installed with --accept (issue 20/21), as the installer's
/// batching sees it: when it joined (ms, on the clock `due_batch` is given
/// `now` on: the validations actor uses its actor clock and the moment its
/// request was first seen, so a wall-clock change moves no batch) and
/// whether it is Up (or Accepting) now.
struct batch_candidate {
  std::string name;
  int64_t joined_unix_ms = 0;
  bool up = false;
};

/// The machines whose installer acceptance starts now: once `delay_ms` has
/// passed since the last of `candidates` joined (a joining batch: a machine
/// joining meanwhile moves the start), every Up one, sorted; empty before
/// then (or when none is Up). The checks then wait for the machines' GPUs to
/// be free by themselves. Never fails.
std::vector<std::string> due_batch(const std::vector<batch_candidate>& candidates,
                                   int64_t now_unix_ms, int64_t delay_ms);

/// The command of a step: `program check --json`, then `--duration 10m`
/// (burn), `--level 2` (dcgm), `--data-dir PATH` (disk; "." when the
/// validation names none: the worker's folder, on the agent's data disk;
/// the validation actor sets data_dir to the machine's data location).
/// Options as bin/check_main.cpp (branch `checks`) reads them.
std::vector<std::string> command_of(const v1::Validation& v, const std::string& check,
                                    const std::string& program);

/// Parses what a check printed as its last line. Errors (ec::invalid_request)
/// name what was wrong: "no result line", "result is not JSON: ...",
/// "result is for check dcgm, not copies", "verdict 'great' is not one of
/// pass, warn, fail, skipped". Unknown fields are ignored.
caf::expected<v1::CheckResult> parse_result(const std::string& line, const std::string& check);

/// Applies the end of a step's run: `run` stopped with `preempted` -> the
/// step is Yielded (queued again); else the result in its worker's outputs
/// ("astraeus.result") -> Done with the verdict, or Failed naming what was
/// wrong; a run that failed to start -> Failed with its words.
/// Returns false when the run has not ended yet.
bool apply_run(v1::ValidationStep& step, const v1::Run& run, int64_t now_unix_ms);

/// Ends `step` without a result: Failed, verdict fail, reason `why`,
/// finished at `now_unix_ms`.
void end_failed(v1::ValidationStep& step, const std::string& why, int64_t now_unix_ms);

/// Ends `step` without running it: Done, verdict skipped (its result's too,
/// the result's check the step's, its summary `why`), reason `why`, finished
/// at `now_unix_ms`.
void end_skipped(v1::ValidationStep& step, const std::string& why, int64_t now_unix_ms);

/// "machine X was removed before the check finished": why a step of a
/// machine that left the cluster ended.
std::string removed_reason(const std::string& machine);

/// A machine of `v` was removed from the cluster: each of its steps that
/// has not ended (a pair's with it as peer too) is Failed, verdict fail,
/// reason removed_reason(machine), finished at
/// `now_unix_ms`. Returns the indices of the steps it ended and, in `runs`,
/// the runs they had submitted (to remove: a run pinned to a machine that
/// is gone never places).
std::vector<int> end_removed(v1::Validation& v, const std::string& machine,
                             int64_t now_unix_ms, std::vector<std::string>& runs);

/// What a Running step says while its run waits to be placed ("its run
/// waits: waiting: no machine … takes new work"); "" when the run is not
/// Waiting. is_waiting_words tells these words from a step's other reasons
/// (which GPUs it left out), so only they are replaced or cleared.
std::string waiting_words(const v1::Run& run);
bool is_waiting_words(const std::string& reason);

/// Why a step ended Cancelled: "cancelled by alice (wrong pool)", or
/// "cancelled by alice" when `why` is empty.
std::string cancelled_words(const std::string& by, const std::string& why);

/// Cancels `v` as `by` asked (`astra astraeus cancel ID`), for `why` (""
/// = none given): each step that has not ended (Queued, Yielded, Running)
/// is Cancelled with no verdict, reason cancelled_words(by, why), finished
/// at `now_unix_ms`; steps Done or Failed keep their results. `v` is
/// Cancelled, `cancelled_by` and `cancel_reason` set, `machines_passed` the
/// machines whose every step had ended and pass, finished at `now_unix_ms`.
/// Returns the runs of the steps that were Running (to remove; step_runs).
std::vector<std::string> cancel(v1::Validation& v, const std::string& by,
                                const std::string& why, int64_t now_unix_ms);

/// The verdict of `machine` in `v` (its steps, the pairs it is in, and the
/// all-reduce groups it is in, each counted as its own step):
/// "fail" when a step failed or its check
/// says fail, "warn" when one warns, "skipped" when every one was skipped
/// (nothing was measured: no pass, and no acceptance), "pass" when all are
/// done, "" while any is not done.
std::string machine_verdict(const v1::Validation& v, const std::string& machine);

/// Whether every step is Done or Failed.
bool finished(const v1::Validation& v);

/// Sets the validation's end once finished: Failed (a machine fails),
/// Skipped (every machine's every step was skipped: nothing was measured),
/// else Passed; `machines_passed` (machines whose verdict is pass) and the
/// finishing time. Returns whether it finished now.
bool conclude(v1::Validation& v, int64_t now_unix_ms);

/// Why `v`'s skipped steps were skipped, each reason once, joined by "; "
/// ("no RDMA port is Active on the same rail …"); empty when none was.
std::string skip_reasons(const v1::Validation& v);

/// "val-… acceptance Passed (on-demand)".
std::string outcome_line(const v1::Validation& v);

} // namespace astraeus::validation
