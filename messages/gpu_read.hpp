#pragma once
/// @file
/// How a GPU, and a machine's GPUs as a whole, were read: the words of
/// `v1::Gpu.status` and `v1::GpuSection.read_as` as enums, their accessors
/// (the `*_code` field when set, else the stored string parsed, so records
/// written before the enums read back the same) and the one predicate for
/// each question the code asks of them.

#include <cstdint>
#include <optional>
#include <string_view>

namespace astraeus {

namespace v1 {
class Gpu;
class GpuSection;
} // namespace v1

/// How one GPU answered its last read (`v1::Gpu.status`; values equal
/// `v1::GpuReadStatus`).
enum class gpu_read_status : uint8_t {
  ok = 1,           ///< "ok": it answered
  unresponsive = 2, ///< a call overran; last known values
  lost = 3,         ///< the driver says it is lost
  unavailable = 4,  ///< the driver cannot be read; last known values
};

/// "ok", "unresponsive", "lost", "unavailable".
const char* to_string(gpu_read_status x);
/// The status for its word; "" is ok; nullopt for any other word.
std::optional<gpu_read_status> parse_gpu_read_status(std::string_view text);

/// The GPU's status: `status_code` when set, else `status` parsed (an
/// unknown word reads as ok, as every reader took it before the enum).
gpu_read_status read_status(const v1::Gpu& gpu);
/// Sets `status_code` and `status`.
void set_read_status(v1::Gpu& gpu, gpu_read_status status);

/// Whether the GPU answered its driver (ok). One that does not (unresponsive,
/// lost, unavailable) is never placed onto, and `astra gpus` names why.
bool answers(gpu_read_status status);
/// Whether the GPU's readings are this pass's (ok, lost), rather than the
/// last known ones kept while the driver does not answer (unresponsive,
/// unavailable): only current readings latch faults or show a replacement.
bool readings_current(gpu_read_status status);

/// How a machine's GPUs were read (`v1::GpuSection.read_as`; values equal
/// `v1::GpuReadAs`).
enum class gpu_read_as : uint8_t {
  unknown = 0,      ///< "" or a word of no known read
  pending = 1,      ///< discovery has not finished
  driver = 2,       ///< "driver: healthy"
  nvidia_smi = 3,   ///< "nvidia-smi"
  no_gpu = 4,       ///< "no-gpu"
  unresponsive = 5, ///< the driver overran; last known GPUs
  unavailable = 6,  ///< the driver cannot be read; last known GPUs
};

/// "", "pending", "driver: healthy", "nvidia-smi", "no-gpu", "unresponsive",
/// "unavailable".
const char* to_string(gpu_read_as x);
/// The read for its word; unknown for "" and any other word.
gpu_read_as parse_gpu_read_as(std::string_view text);

/// The section's read: `read_as_code` when set, else `read_as` parsed.
gpu_read_as read_as(const v1::GpuSection& section);
/// Sets `read_as_code` and `read_as`.
void set_read_as(v1::GpuSection& section, gpu_read_as how);

/// Whether the section lists every GPU the machine has (driver, nvidia-smi,
/// no-gpu), so a GPU missing from it is gone; not the last known ones
/// (unresponsive, unavailable) nor none yet (pending).
bool is_complete_read(gpu_read_as how);

} // namespace astraeus
