#pragma once
/// @file
/// The `astra` commands that the Cluster Report's "What to fix" lines and
/// the checks' findings name, built in one place so that each is a command
/// astra really parses (test/unit/bin/fix_commands_test.cpp parses every
/// one with astra's own command tree). Placeholders a user fills in are in
/// capitals (PATH, POOL).

#include <string>

namespace astraeus::fix_command {

/// "astra gpus --machine MACHINE": the machine's GPUs with their health.
std::string gpus(const std::string& machine);

/// "astra gpu clear-fault MACHINE GPU": clears a repaired GPU's latch.
std::string clear_fault(const std::string& machine, const std::string& gpu);

/// "astra xids": which Xids fence, mark at risk or are recorded.
std::string xids();

/// "astra machine data-location MACHINE PATH": where a machine keeps data.
std::string data_location(const std::string& machine);

/// "astra astraeus validate --suite SUITE --machine MACHINE".
std::string validate_machine(const std::string& suite, const std::string& machine);

/// "astra astraeus validate --suite SUITE --pool POOL" (POOL when `pool`
/// is empty).
std::string validate_pool(const std::string& suite, const std::string& pool);

/// "astra astraeus topology": the fabrics and their findings.
std::string topology();

} // namespace astraeus::fix_command
