#pragma once
/// @file
/// Kernel-log events at a PCI address with no GPU (issue 17, rule 6): an
/// NVSwitch, a bridge. They are kept and shown (unmapped incidents) and
/// reflected in the machine's conditions: a fault at a device the GPUs'
/// NVLinks lead to (an NVSwitch: the NVLink fabric) makes the condition
/// "NVLink fabric healthy" false (reason `FabricFault`) and the GPUs that
/// use it fenced (the event's action is fence: a fatal SXid, a fencing Xid)
/// or at risk (at-risk: a non-fatal SXid); an event at another device
/// raises "Devices without a GPU" (reason `DeviceEvent`). Also what an Xid
/// line says besides its number (rule 9: `pid=`, `name=`; rule 5: its
/// severity).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The severity a driver line states: true for "Fatal", false for
/// "Nonfatal" / "Non-fatal" / "Non fatal" (any case), nullopt when it says
/// neither (NVIDIA's NVLink Xids 144-150 and SXids carry one, e.g.
/// "145, RLW_REMAP Nonfatal XC0 ..." or "SXid ...: 24007, Fatal, Link 44").
std::optional<bool> fatal_severity(std::string_view text);

/// The process an Xid line names: `pid=1234` (0 when absent or
/// "'<unknown>'") and `name=python3` ("" when absent or unknown).
std::pair<int32_t, std::string> process_of(std::string_view text);

/// The GPUs of `section` with an NVLink whose far end is at `pci` (an
/// NVSwitch or another device), in the section's order.
std::vector<const v1::Gpu*> gpus_linked_to(const v1::GpuSection& section,
                                           const std::string& pci);

/// Adds the conditions the section's unmapped incidents call for (seen in
/// the 24 h before `now_unix_ms`, action fence or at-risk): "NVLink fabric
/// healthy" (false, `FabricFault`, naming each device, what it logged and
/// the GPUs that use it; true, `FabricHealthy`, when GPUs have NVLinks to
/// switches and nothing was logged there) and "Devices without a GPU"
/// (false, `DeviceEvent`) for events at other addresses.
void add_device_conditions(v1::GpuSection& section, int64_t now_unix_ms);

} // namespace astraeus
