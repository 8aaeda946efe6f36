#pragma once
/// @file
/// A field nvidia-smi keeps reading as `[Unknown Error]` on one GPU is a
/// sign of trouble (issue 18, rule 6): after `unknown_error_reports` reports
/// in a row the GPU is at risk, "nvidia-smi cannot read <field>".

#include <map>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Reports in a row a field must read `[Unknown Error]` before it counts.
inline constexpr unsigned unknown_error_reports = 3;

/// The fields of one GPU that keep reading `[Unknown Error]`.
class gpu_read_errors {
public:
  /// Takes one report's facts of the GPU; answers "nvidia-smi cannot read
  /// <field>" for each field its `unknown_fields` said "<field>: Unknown
  /// Error" in `unknown_error_reports` reports in a row (a report without
  /// it starts the field's count again).
  std::vector<std::string> take(const v1::Gpu& gpu);

private:
  std::map<std::string, unsigned> streak_;
};

} // namespace astraeus
