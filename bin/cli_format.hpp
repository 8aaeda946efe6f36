#pragma once
/// @file
/// How `astra` prints: aligned tables for people, JSON for scripts.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/message.h>

#include "messages/astraeus.pb.h"
#include "runtime/gate/tokens.hpp"

namespace astraeus::cli {

/// `text` with each control byte (below 0x20, and 0x7f) written as "\xHH",
/// so that a value someone sent cannot move the cursor, colour or clear the
/// terminal it is printed on; other bytes (UTF-8) as they are.
std::string control_escaped(std::string_view text);

/// A table with a header row; columns are padded to their widest cell, and
/// each cell is `control_escaped`.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);

/// `astra machines`: one line per machine.
std::string format_machine_list(const v1::MachineList& list, int64_t now_unix_ms,
                                const v1::GpuList* gpus = nullptr);

/// `astra machine NAME`: one machine in full.
std::string format_machine(const v1::MachineView& view, int64_t now_unix_ms);

/// `astra gpus`: one line per GPU.
std::string format_gpu_list(const v1::GpuList& list, int64_t now_unix_ms);

/// The GPU part of `astra machine NAME`: how they were read, the GPUs, the
/// GPUs on the bus, conditions and capabilities.
std::string format_gpu_section(const v1::GpuSection& section);

/// The history part of `astra gpu show MACHINE GPU`: one terminal sparkline
/// (▁▂▃▄▅▆▇█, one column a minute) per series over the hour before
/// `now_unix_ms` (utilisation 0-100 %; the others scaled from their lowest
/// to their highest value), with the lowest, highest and latest values; a
/// blank column is a minute without a report. Says so when nothing of the
/// last hour is kept.
std::string format_gpu_history(const v1::GpuHistory& history, int64_t now_unix_ms);

/// `astra runs`: one line per run: NAME, STATE, WORKERS, GPUS/WORKER,
/// LEADER, SUBMITTED, WHY; with a WORKSPACE column first when the runs are
/// of more than one workspace (two runs may then share a name).
std::string format_run_list(const v1::RunList& list, int64_t now_unix_ms);

/// `astra runs` and `astra slurm squeue`: format_run_list of the user's
/// runs, the validations' check runs left out and counted in a last line
/// "(N validation check runs not shown: astra runs --all)"; every run with
/// `all`.
std::string format_user_runs(const v1::RunList& list, int64_t now_unix_ms, bool all);

/// `astra run show NAME`: the run and its workers, then what the workers
/// wrote to $ASTRAEUS_OUTPUTS (one row per worker and key).
std::string format_run(const v1::Run& run, int64_t now_unix_ms);

/// `astra workspaces`: name, organisation, namespace and grants (labels
/// their machines must carry), one row each.
std::string format_workspaces(const v1::WorkspaceList& list);

/// What `astra run` says after submitting, the seed's line: "whoami
/// submitted to gpu-east: https://console…/o/acme/w/vision/jobs/gpu-east/whoami"
/// (`cluster`: the controller's `cluster.name`, from its welcome; left out
/// when empty); without a console address configured on the controller
/// (Run.console_url empty), "whoami submitted to gpu-east". A run that
/// waits adds a line saying so and why ("Waiting (waiting: needs 1 GPU; …)").
std::string format_submitted(const v1::Run& run, const std::string& cluster = {});

/// `astra xids`: the Xid policy table.
std::string format_xid_policy(const v1::XidPolicyTable& table);

/// A message as one-line JSON, e.g. {"uuid":"GPU-...","cleared":true}.
std::string to_json_compact(const google::protobuf::Message& msg);

/// Any message as JSON with the schema's field names, every field printed.
std::string to_json(const google::protobuf::Message& msg);

/// The install command (runtime/gate/tokens.hpp), shared with the HTTP API.
/// A warning for an install command whose addresses are loopback ones
/// (127.0.0.1, localhost, [::1]: the dev cluster's), saying how to
/// advertise an address other machines reach; empty otherwise.
std::string loopback_warning(const std::string& command);

using astraeus::install_command;

/// `token` as `astra tokens create` shows it to a user who reached the
/// cluster at `addr` (astra's --addr: one gate, or every controller's in HA
/// mode): its install command filled in when the controller sent none
/// (`install_command` naming the controller's advertised gate, else
/// `addr`); when the controller advertises no gate (gate.advertise_address
/// unset) and `addr` names several, the command names all of them, not
/// only the leader's gate that answered (`install_command_naming`). Its
/// controller_address, when the controller sent none, is the gate(s) the
/// install command names (`gate_named_in`; `addr` when it names none),
/// never "".
v1::JoinToken join_token_for(v1::JoinToken token, const std::string& addr);

/// What `astra tokens create` prints: the token, its id, expiry and
/// labels, and the install command.
std::string format_join_token(const v1::JoinToken& token,
                              const std::string& address, int64_t now_unix_ms);

/// `astra audit`: one line per record, newest first.
std::string format_audit(const v1::AuditList& list);

/// "4s ago", "3m ago", "2h ago", "5d ago"; "never" for 0.
std::string format_age(int64_t then_unix_ms, int64_t now_unix_ms);

} // namespace astraeus::cli
