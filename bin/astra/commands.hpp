#pragma once
/// @file
/// astra's commands, one function per command group. Each adds its
/// commands to `app` and keeps their option values in `inv`; a command's
/// callback sets `inv.rc`. `astra COMMAND` and `astra astraeus COMMAND`
/// are both built from `command_groups()`, each tree with storage of its own.

#include <optional>
#include <vector>

#include <CLI/CLI.hpp>

#include "bin/astra/invocation.hpp"

namespace astraeus::cli {

/// Adds a group of commands to `app`, keeping their options in `inv`.
using command_group = void (*)(CLI::App& app, invocation& inv);

/// `machines`, `machine NAME` (bin/astra/machine_commands.cpp).
void add_machine_views(CLI::App& app, invocation& inv);
/// `label`, `cordon`, `uncordon`, `maintenance` (bin/astra/machine_commands.cpp).
void add_machine_actions(CLI::App& app, invocation& inv);
/// `gpus`, `gpu clear-fault`, `xids` (bin/astra/gpu_commands.cpp).
void add_gpu_commands(CLI::App& app, invocation& inv);
/// The GPU of `list` named `id` (its id, PCI address or index, as `astra
/// gpus` shows them); null when none.
const v1::GpuView* find_gpu(const v1::GpuList& list, const std::string& id);
/// The GPU `id` of `machine` (find_gpu over the controller's list); none,
/// with inv.rc set, when the controller cannot be asked (its exit code) or
/// the machine has no such GPU (1, said on stderr).
std::optional<v1::GpuView> ask_gpu(invocation& inv, const std::string& machine,
                                   const std::string& id);
/// `run` (and `run show`), `runs` (bin/astra/run_commands.cpp).
void add_run_commands(CLI::App& app, invocation& inv);
/// `logs`, `delete`: a run's output, stopping a run (bin/astra/run_commands.cpp).
void add_run_control_commands(CLI::App& app, invocation& inv);
/// `workspace create`, `workspaces` (bin/astra/workspace_commands.cpp).
void add_workspace_commands(CLI::App& app, invocation& inv);
/// `tokens create`, `api-tokens create|revoke`, `whoami`, `audit`, `login`, `logout`
/// (bin/astra/access_commands.cpp).
void add_access_commands(CLI::App& app, invocation& inv);
/// `validate`, `validations`, `validation ID`, `report`, `policy set|list|delete`,
/// `accept` (bin/astra/validation_commands.cpp; issue 21).
void add_validation_commands(CLI::App& app, invocation& inv);
/// `version` (bin/astra/access_commands.cpp).
void add_version_command(CLI::App& app, invocation& inv);
/// `completion bash|zsh` (bin/astra/completion_commands.cpp).
void add_completion_command(CLI::App& app, invocation& inv);

/// `machine remove`, `drain`, `tokens list|revoke`, `api-tokens list`,
/// `workspace delete`, `gpu show` (bin/astra/day2_commands.cpp); after the
/// groups whose commands it extends.
void add_day2_commands(CLI::App& app, invocation& inv);
/// `slurm sbatch|squeue|scancel` (bin/astra/slurm_commands.cpp).
void add_slurm_commands(CLI::App& app, invocation& inv);

/// Every command group, in the order `astra --help` lists their commands.
const std::vector<command_group>& command_groups();

/// Adds every command group to `app`.
void add_commands(CLI::App& app, invocation& inv);

} // namespace astraeus::cli
