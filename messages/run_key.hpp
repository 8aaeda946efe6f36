#pragma once
/// @file
/// Issue 13: run names are unique per workspace, as Kubernetes names are per
/// namespace: two workspaces may each have a run `train`. A run's key (in
/// the scheduler, its queue names and the store, family `runs`) is its
/// name in the default workspace and "<workspace>/<name>" in any other;
/// '/' is in neither a run's nor a workspace's name. Runs stored before
/// issue 13 are keyed by their bare name: those of the default workspace
/// keep their key, the others are moved to theirs when the scheduler loads
/// them (actors/scheduler/scheduler_restart.cpp).
///
/// A request names a run by a reference (`run_ref`): "<workspace>/<name>"
/// when the caller named a workspace (`--workspace`, `?workspace=`), that
/// workspace only; a bare name when it did not: the default workspace's
/// run, else the one run of that name in any workspace (what `astra run
/// show NAME` meant before names were per workspace).

#include <string>
#include <string_view>

namespace astraeus {

namespace v1 {
class RunSpec;
} // namespace v1

/// The workspace every run without one is submitted to; it exists without
/// being created and is granted nothing (all machines) until created with
/// grants.
inline constexpr const char* default_workspace = "default";

/// The key of run `name` in `workspace` ("" or "default": the default
/// workspace, whose keys are bare names).
std::string run_key(std::string_view workspace, std::string_view name);

/// The key of the run `spec` describes (its `workspace` and `name`).
std::string run_key(const v1::RunSpec& spec);

/// A request's reference to run `name`: "<workspace>/<name>" when
/// `workspace` is given (even "default": that workspace only), else the
/// bare name (see the file comment).
std::string run_ref(std::string_view workspace, std::string_view name);

/// The parts of a key or a reference: the workspace ("" for a bare name)
/// and the run's name.
struct run_ref_parts {
  std::string workspace;
  std::string name;
};

/// Splits a key or a reference at its '/'.
run_ref_parts parse_run_ref(std::string_view ref);

/// How messages name the run of a key or reference: "train" for a bare
/// name, "train in workspace vision" otherwise.
std::string describe_run(std::string_view ref);

} // namespace astraeus
