#include "runtime/faults/kmsg_assembler.hpp"

#include "runtime/host/sysfs_text.hpp"

// Like kmsg.cpp, free of the rest of the runtime so the fuzz target builds it.

namespace astraeus {

namespace {

/// Continuation records joined onto one notice at most, and its length.
constexpr int max_joined = 6;
constexpr size_t max_pending_bytes = 2048;

bool has_pci_address(std::string_view text) {
  // A record that is no event but names a GPU: its address parses as the
  // one of a fallen-off-the-bus notice would.
  kmsg_record probe;
  probe.message = "NVRM: fallen off the bus " + std::string{text};
  auto ev = parse_gpu_event(probe);
  return ev && !ev->pci_address.empty();
}

bool nvrm(std::string_view message) {
  return starts_with(trim(message), "NVRM:");
}

} // namespace

std::vector<std::string> split_kmsg_lines(const std::string& message) {
  std::vector<std::string> out;
  size_t from = 0;
  auto cut = [&](size_t to, size_t skip) {
    if (to > from && !trim(std::string_view{message}.substr(from, to - from)).empty())
      out.push_back(message.substr(from, to - from));
    from = to + skip;
  };
  for (size_t i = 0; i < message.size();) {
    if (message.compare(i, 4, "\\x0a") == 0 || message.compare(i, 4, "\\x0A") == 0) {
      cut(i, 4);
      i += 4;
    } else if (message[i] == '\n') {
      cut(i, 1);
      i += 1;
    } else {
      ++i;
    }
  }
  cut(message.size(), 0);
  return out;
}

void kmsg_assembler::restart() {
  pending_.clear();
  joined_ = 0;
  last_sequence_ = 0;
  next_part_ = 0;
  jumped_ = false;
}

std::vector<gpu_event> kmsg_assembler::finish(std::vector<gpu_event> events,
                                              const kmsg_record& record) {
  for (auto& ev : events) {
    ev.sequence = record.sequence;
    ev.timestamp_us = record.timestamp_us;
    ev.part = record.sequence == 0 ? 0 : next_part_++;
    ev.after_jump = jumped_;
  }
  return events;
}

std::vector<gpu_event> kmsg_assembler::take(const kmsg_record& record, std::string* warning) {
  if (record.sequence != 0) {
    if (last_sequence_ != 0 && record.sequence < last_sequence_) {
      if (warning != nullptr)
        *warning = "the kernel log's sequence numbers went back from "
                   + std::to_string(last_sequence_) + " to "
                   + std::to_string(record.sequence)
                   + " within this boot; the records from there on are read, not skipped";
      jumped_ = true;
    }
    if (record.sequence != last_sequence_)
      next_part_ = 0;
    last_sequence_ = record.sequence;
  }

  std::vector<gpu_event> events;
  auto lines = split_kmsg_lines(record.message);
  for (size_t i = 0; i < lines.size(); ++i) {
    kmsg_record line = record;
    line.message = std::move(lines[i]);
    line.indented = i == 0 && record.indented;
    take_line(line, events);
  }
  return finish(std::move(events), record);
}

void kmsg_assembler::take_line(const kmsg_record& line, std::vector<gpu_event>& events) {
  // A continuation of the pending notice: indented, or an NVRM line that
  // names no GPU of its own ("NVRM: fallen off the bus and is not ...").
  bool continues = !pending_.empty() && joined_ < max_joined
                   && (line.indented || (nvrm(line.message) && !has_pci_address(line.message)));
  if (continues) {
    std::string_view more = trim(line.message);
    if (starts_with(more, "NVRM:"))
      more = trim(more.substr(5));
    pending_ += " ";
    pending_.append(more.substr(0, max_pending_bytes));
    ++joined_;
    kmsg_record joined = line;
    joined.message = pending_;
    if (auto ev = parse_gpu_event(joined)) {
      pending_.clear();
      joined_ = 0;
      events.push_back(std::move(*ev));
    } else if (pending_.size() > max_pending_bytes) {
      pending_.clear();
      joined_ = 0;
    }
    return;
  }
  pending_.clear();
  joined_ = 0;
  if (auto ev = parse_gpu_event(line))
    events.push_back(std::move(*ev));
  else if (nvrm(line.message) && has_pci_address(line.message)
           && line.message.size() <= max_pending_bytes)
    // "NVRM: The NVIDIA GPU 0000:01:00.0": what follows may complete it.
    pending_ = std::string{trim(line.message)};
}

} // namespace astraeus
