#pragma once
/// @file
/// The disk check's built-in test where fio is not installed: O_DIRECT
/// sequential write then read of a file in 1 MiB blocks, then 4 KiB random
/// reads from 32 threads at once (about fio's iodepth 32).

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "runtime/validation/disk_check.hpp"

namespace astraeus::validation {

/// Writes `bytes` to `file` (created; the caller removes it), reads it
/// back, then reads random 4 KiB blocks for up to `seconds` / 3. Errors:
/// ec::host_read_failure naming the call and errno ("open ...: O_DIRECT is
/// not supported here (EINVAL)").
caf::expected<disk_figures> direct_io_test(const std::string& file, uint64_t bytes,
                                           double seconds);

}  // namespace astraeus::validation
