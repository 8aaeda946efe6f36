#include "runtime/validation/fix_commands.hpp"

namespace astraeus::fix_command {

std::string gpus(const std::string& machine) {
  return "astra gpus --machine " + machine;
}

std::string clear_fault(const std::string& machine, const std::string& gpu) {
  return "astra gpu clear-fault " + machine + " " + gpu;
}

std::string xids() {
  return "astra xids";
}

std::string data_location(const std::string& machine) {
  return "astra machine data-location " + machine + " PATH";
}

std::string validate_machine(const std::string& suite, const std::string& machine) {
  return "astra astraeus validate --suite " + suite + " --machine " + machine;
}

std::string validate_pool(const std::string& suite, const std::string& pool) {
  return "astra astraeus validate --suite " + suite + " --pool "
         + (pool.empty() ? std::string{"POOL"} : pool);
}

std::string topology() {
  return "astra astraeus topology";
}

} // namespace astraeus::fix_command
