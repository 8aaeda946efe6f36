#pragma once
/// @file
/// What the machine actor notices in an agent's GPU list (issue 18, rule 1):
/// a GPU listed twice is kept once, with a warning for the machine page.

#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Removes every GPU of `section` whose id an earlier GPU of the list has
/// (the first is kept: it is shown once); answers one warning per id
/// removed ("GPU X is listed twice by the agent; shown once"). GPUs
/// without an id are left alone.
std::vector<std::string> fold_repeated_gpus(v1::GpuSection& section);

} // namespace astraeus
