#pragma once
/// @file
/// From kernel-log records to GPU events, whatever shape the driver logged
/// them in (shared/seeds/gpus.md, "What fences a GPU"; issue 17, rules 3
/// and 10):
/// - one /dev/kmsg record holding several lines, "\x0a" between them (the
///   kernel's escape for a newline): each line is parsed on its own;
/// - one notice logged as several records, only the first with the driver's
///   "NVRM:" header and a PCI address, the rest indented continuation lines
///   (or "NVRM:" lines naming no address): joined onto the first;
/// - records of one message share a sequence number: each event gets its
///   index within that number (`gpu_event::part`), so (sequence, part)
///   names it exactly;
/// - a sequence number that goes back within one read of the log is flagged
///   on every later event of that read (`gpu_event::after_jump`) and named
///   once in a warning, so the caller reads it instead of skipping it.
///
/// Independent of CAF and of the reader's thread, so tests feed it records.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/faults/kmsg.hpp"

namespace astraeus {

/// Assembles the GPU events of one read of a kernel log, record by record.
/// One thread at a time.
class kmsg_assembler {
public:
  /// The events `record` completes, in log order (often none). A backward
  /// jump of the sequence number sets `*warning` (when not null) to a line
  /// naming it; otherwise `*warning` is left alone.
  std::vector<gpu_event> take(const kmsg_record& record, std::string* warning = nullptr);

  /// A new read of the log begins (the path was opened again): the
  /// sequence numbers may start over without that being a jump, and a
  /// notice cut by the reopen is not joined across it.
  void restart();

private:
  /// One line of a record: joined onto the pending notice, or parsed.
  void take_line(const kmsg_record& line, std::vector<gpu_event>& events);
  std::vector<gpu_event> finish(std::vector<gpu_event> events, const kmsg_record& record);

  /// The last record with the "NVRM:" header and a PCI address that was
  /// no event: what continuation records are joined onto; "" when none.
  std::string pending_;
  /// Continuation records joined onto `pending_` so far.
  int joined_ = 0;
  uint64_t last_sequence_ = 0;  ///< of the previous record of this read
  uint32_t next_part_ = 0;      ///< the next event's index within last_sequence_
  bool jumped_ = false;         ///< this read went back once already
};

/// Splits a record's message at the kernel's "\x0a" escapes (and real
/// newlines); the parts as logged, empty ones left out.
std::vector<std::string> split_kmsg_lines(const std::string& message);

} // namespace astraeus
