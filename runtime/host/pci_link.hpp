#pragma once
/// @file
/// A PCIe device's link as the kernel gives it in sysfs:
/// <root>/sys/bus/pci/devices/<address>/{current,max}_link_{width,speed}
/// ("16", "32.0 GT/s PCIe"), with the raw rate it carries. Read under a
/// configurable root so tests use fixture trees (DESIGN.md, "Host access").

#include <optional>
#include <string>
#include <string_view>

namespace astraeus {

/// One PCIe link: width and speed trained now and the most the device can.
struct pci_link {
  std::optional<int> current_width;      ///< lanes
  std::optional<int> max_width;          ///< lanes
  std::optional<double> current_gts;     ///< GT/s per lane: 2.5, 5, 8, 16, 32, 64
  std::optional<double> max_gts;
  /// "<path relative to root>: <why>" for each file present but unreadable
  /// or malformed ("... current_link_speed: 'Unknown'"); empty when all read.
  std::string error;
};

/// Reads the four link files of the device at `address` ("0000:3b:00.0")
/// under `root` ("/" reads this machine). Absent files leave fields empty
/// without an error; never throws.
pci_link read_pci_link(const std::string& root, const std::string& address);

/// "32.0 GT/s PCIe", "16 GT/s", "8.0 GT/s" -> 32, 16, 8; nullopt for
/// "Unknown" or anything not "<number> GT/s ...".
std::optional<double> parse_link_speed(std::string_view text);

/// The PCIe generation of a lane rate: 2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4,
/// 32 -> 5, 64 -> 6; 0 when it is none of them.
int pcie_generation(double gts);

/// Data bytes per second per lane and direction after line encoding, in
/// GB/s: 8b/10b for Gen1-2 (2.5 -> 0.25), 128b/130b for Gen3-5 (32 ->
/// 3.938), 242/256 FLIT for Gen6 (64 -> 7.56). 0 for an unknown rate.
double pcie_lane_gbs(double gts);

/// "Gen5 x16" (or "32 GT/s x16" for an unknown generation; "?" for an
/// unknown part).
std::string pcie_link_text(std::optional<double> gts, std::optional<int> width);

}  // namespace astraeus
