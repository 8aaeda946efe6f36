// The order of astra's command groups, and the tree built from them.

#include "bin/astra/commands.hpp"

namespace astraeus::cli {

const std::vector<command_group>& command_groups() {
  static const std::vector<command_group> groups{
    add_machine_views,  add_gpu_commands,    add_run_commands,
    add_workspace_commands, add_run_control_commands, add_machine_actions,
    add_access_commands, add_validation_commands, add_version_command,
    add_completion_command, add_day2_commands,  add_slurm_commands,
  };
  return groups;
}

void add_commands(CLI::App& app, invocation& inv) {
  for (auto add : command_groups())
    add(app, inv);
}

} // namespace astraeus::cli
