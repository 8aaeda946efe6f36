#pragma once
/// @file
/// Readings reports (issue 14): what in a machine's facts changes from one
/// report to the next, apart from what does not.
///
/// The readings are, and are only:
///   host: uptime_seconds, memory.available_bytes, memory.swap_free_bytes,
///         memory.pressure, io_pressure, cpu_pressure, cpu.use_percent,
///         each NUMA node's memory_free_bytes, each filesystem's free_bytes;
///   GPU:  memory_used_bytes, utilization_percent, temperature_c,
///         power_watts, sm_clock_mhz, memory_clock_mhz, fan_percent,
///         temperatures (AMD's sensors).
/// Everything a GPU's health, a fence or the scheduler reads beyond those
/// (ECC and RAS counters, row remapping, NVLinks, PCIe replays, thermal
/// slowdown, status, latches, incidents, conditions, pressure's inputs'
/// totals) is not a reading: when it changes the agent sends a full report.
/// GPU memory used is a reading although the Foreign verdict reads it: a
/// readings report still reaches every GPU actor, which judges again.

#include <string>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// `facts` with every reading cleared: two reports whose static parts
/// serialize to the same bytes differ in readings alone.
v1::HostFacts without_readings(const v1::HostFacts& facts);

/// The readings of `facts` alone (MachineReport.readings): each NUMA node's
/// id and free memory, each filesystem's free bytes, each GPU's id and
/// readings, in `facts`' order.
v1::HostReadings readings_only(const v1::HostFacts& facts);

/// Why `readings` do not fit `facts`: another count of GPUs, filesystems or
/// NUMA nodes, or a GPU id or node id that is not the one at the same place
/// in `facts` (readings meant for another full report). Empty string: they
/// fit.
std::string readings_misfit(const v1::HostReadings& readings, const v1::HostFacts& facts);

/// Copies `readings` into `facts` (the pressures are moved out of
/// `readings`; its GPUs are left as they were, for their actors). Refuses,
/// changing nothing and returning readings_misfit's reason, when they do
/// not fit. Empty string: applied.
std::string apply_readings(v1::HostReadings& readings, v1::HostFacts& facts);

/// Copies one GPU's readings into its facts (a reading `readings` lacks is
/// cleared: it was not read this time).
void apply_gpu_readings(const v1::GpuReadings& readings, v1::Gpu& facts);

} // namespace astraeus
