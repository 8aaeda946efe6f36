#pragma once
/// @file
/// The kernel log as a source of GPU faults (see the GPU docs, "Health" and
/// "What fences a GPU"): NVIDIA Xid events, "fallen off the bus" notices
/// and AMD GPU resets and ring timeouts, read from /dev/kmsg.
///
/// Nothing here throws. A line that is not a record, or a record that is not
/// a GPU event, is simply not one (nullopt); a field the log does not carry
/// stays unknown. The parsers take any bytes, as the fuzz target checks.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace astraeus {

/// The wall-clock time a line of a syslog file or of `dmesg -T` carries, as
/// written: "Dec  6 22:00:00" (rsyslog's traditional format, `journalctl
/// -k`: no year, the machine's local time), "2026-12-06T22:00:00.123+01:00"
/// (rsyslog's RFC 3339 format), "[Sun Dec  6 22:00:00 2026]" (`dmesg -T`:
/// local time). Such a file keeps the lines of earlier boots, which are
/// history, not evidence (`fault_latches::on_event`).
struct log_wall_time {
  int year = 0;    ///< e.g. 2026; 0 when the format leaves it out
  int month = 1;   ///< 1-12
  int day = 1;     ///< 1-31
  int hour = 0;    ///< 0-23
  int minute = 0;  ///< 0-59
  int second = 0;  ///< 0-60 (a leap second)
  /// Seconds east of UTC where the line gave a zone (RFC 3339: "Z" is 0);
  /// nullopt: the machine's local time.
  std::optional<int32_t> utc_offset_s;
};

/// Milliseconds since the Unix epoch of `t`. A missing year is the latest
/// one that puts `t` no later than a day after `now_unix_ms` (December's
/// lines read in January are last year's). nullopt for a date or time that
/// does not exist (February 30th, 25:00).
std::optional<int64_t> resolve_wall_time(const log_wall_time& t, int64_t now_unix_ms);

/// One kernel-log record.
struct kmsg_record {
  /// The syslog priority as logged: facility * 8 + level (the level is
  /// `priority & 7`; kernel messages have facility 0, text written to
  /// /dev/kmsg from user space usually 1). -1 when the line did not say
  /// (a plain dmesg line without a "<6>" prefix).
  int priority = -1;
  /// The kernel's record sequence number; 0 for a plain dmesg line.
  uint64_t sequence = 0;
  /// Microseconds since boot (monotonic clock); 0 when the line did not say.
  uint64_t timestamp_us = 0;
  /// The text after the header, as logged (the kernel writes bytes it deems
  /// unprintable as "\xHH" escapes; they are not decoded); no line end.
  std::string message;
  /// The message was indented (a /dev/kmsg message starting with a space or
  /// a tab, a plain line with more than one space after its timestamp): a
  /// continuation of the record before it (kmsg_assembler joins them).
  bool indented = false;
  /// The wall-clock time of a syslog-file or `dmesg -T` line; nullopt for
  /// /dev/kmsg records and plain dmesg lines (they carry none).
  std::optional<log_wall_time> wall;
};

/// Parses one line of /dev/kmsg (or a plain dmesg line); nullopt for
/// continuation lines, empty lines and lines that are not records.
///
/// Accepted shapes, a trailing "\n" or "\r\n" allowed:
/// - /dev/kmsg: "prio,seq,timestamp_us,flags[,more fields];message", e.g.
///   "6,1234,5678901234,-;NVRM: ..." or "6,1,2,-,caller=T42;...". The three
///   numbers must be decimal and fit (priority in an int); anything else
///   that starts with "<digits>," (a truncated "6,12", a huge number) is
///   not a record.
/// - plain: an optional "<prio>" (dmesg -r), then an optional
///   "[ seconds.fraction]" timestamp (a malformed or overflowing one makes
///   the line not a record), then an optional "[ T123]" caller id, then the
///   message. A line with none of these is a record whose whole text is the
///   message ("NVRM: Xid ..." alone).
/// - a syslog file's line (/var/log/kern.log, `journalctl -k`): "Dec  6
///   22:00:00 host kernel: " or "2026-12-06T22:00:00.123456+00:00 host
///   kernel: " before a plain line; and `dmesg -T`'s "[Sun Dec  6 22:00:00
///   2026]" in place of the timestamp (the record's timestamp stays 0). The
///   time such a prefix gives is the record's `wall` (none when it does not
///   read as a date and time: the line is still a record).
/// - a line that starts with a space or a tab is a continuation line of the
///   previous /dev/kmsg record (a KEY=VALUE dictionary entry): nullopt.
std::optional<kmsg_record> parse_kmsg_line(std::string_view line);

/// What a GPU event is.
enum class gpu_event_kind {
  xid,                  ///< "NVRM: Xid (PCI:dddd:bb:dd): <n>, ..."
  fallen_off_bus,       ///< an NVRM "GPU ... has fallen off the bus" notice without an Xid
  amd_reset_begin,      ///< "amdgpu <pci>: amdgpu: GPU reset begin!"
  amd_reset_succeeded,  ///< "amdgpu <pci>: amdgpu: GPU reset(<n>) succeeded!"
  amd_reset_failed,     ///< "GPU reset(<n>) failed", "ASIC reset failed with error, ..."
  amd_ring_timeout,     ///< "[*ERROR* ]ring <name> timeout, ..."
  /// "amdgpu <pci>: amdgpu: VRAM is lost due to GPU reset!": the GPU's
  /// memory did not survive a reset.
  amd_vram_lost,
  /// An amdgpu RAS fatal event: "... uncorrectable hardware error(s) ...",
  /// "... fatal error ..." (5.x and 6.x wordings).
  amd_ras_fatal,
  /// "NVRM: GPU at PCI:dddd:bb:dd: GPU-<uuid>": which GPU is at an address
  /// (logged with an Xid), even when NVML does not list it; no fault.
  gpu_identity,
  /// "nvidia-nvswitch<n>: SXid (PCI:dddd:bb:dd.f): <n>, <Fatal|Non-fatal>,
  /// ...": an NVSwitch error (issue 17, rule 6), at an address with no GPU;
  /// its number is in `xid`.
  nvswitch_sxid,
};

/// A GPU event from the kernel log.
struct gpu_event {
  /// What happened.
  gpu_event_kind kind = gpu_event_kind::xid;
  /// The GPU's PCI address, "dddd:bb:dd.f", lower case, the domain kept as
  /// logged ("0002:c1:00.0" is not "0000:c1:00.0"); an Xid names only
  /// domain:bus:device, so its function is 0. "" when the message names no
  /// GPU (the old amdgpu_job_timedout ring timeout, a fallen-off-the-bus
  /// notice without an address).
  std::string pci_address;
  /// The Xid number; set for kind xid (and the SXid's for nvswitch_sxid).
  std::optional<uint32_t> xid;
  /// The GPU's UUID ("GPU-..."); set for kind gpu_identity only.
  std::string uuid;
  /// The message as logged, trimmed, at most 512 bytes (cut at a character
  /// boundary), valid UTF-8 (bytes that are not become U+FFFD).
  std::string text;
  /// The record's sequence number (0 when the line had none); lets a caller
  /// skip events it saw before a restart, as /dev/kmsg is read from its
  /// beginning.
  uint64_t sequence = 0;
  /// The record's timestamp, microseconds since boot (0 when unknown).
  uint64_t timestamp_us = 0;
  /// Its index among the events of one sequence number (the lines of one
  /// record, records that share a number): (sequence, part) names it.
  uint32_t part = 0;
  /// The log's sequence numbers went back earlier in this read (within one
  /// boot): the event is read even at or below the kept position.
  bool after_jump = false;
  /// The record's wall-clock time (`kmsg_record::wall`): a syslog file's
  /// line of an earlier boot fences nothing.
  std::optional<log_wall_time> wall;
};

/// The GPU event a record carries, if any. Never throws; garbage -> nullopt.
///
/// The message must start with the driver's prefix ("NVRM: ", "amdgpu
/// <pci>: " or "[drm:amdgpu_...]"), so text that merely quotes such a line
/// (an audit record of a shell command) is no event. One fault often logs
/// several records (an Xid 79, "NVRM: GPU at PCI:...", the board serial,
/// the Xid again, a fallen-off-the-bus notice): each record that is an
/// event is one; merging them is the caller's business. A record written by
/// user space (facility 1, `echo ... > /dev/kmsg` as root) is parsed like
/// one from the kernel, so operators can inject test events.
std::optional<gpu_event> parse_gpu_event(const kmsg_record& record);

/// The first NVIDIA GPU UUID in `text` ("GPU-" followed by hex digits and
/// dashes, as NVRM logs it); "" when there is none.
std::string gpu_uuid_in(std::string_view text);

/// The kernel log the agent reads unless configured otherwise.
inline constexpr const char* kmsg_default_path = "/dev/kmsg";

/// "xid", "fallen_off_bus", "amd_reset_begin", "amd_reset_succeeded",
/// "amd_reset_failed", "amd_ring_timeout", "amd_vram_lost", "amd_ras_fatal",
/// "gpu_identity", "nvswitch_sxid"; "unknown" for any other value.
const char* to_string(gpu_event_kind kind);

/// Reads a kernel log on a thread of its own and calls `on_event` (from
/// that thread, in log order) for every GPU event. Independent of CAF.
///
/// What the path is decides how it is read:
/// - a character device (/dev/kmsg): from its first retained record, so
///   events logged before the agent started are seen (duplicates across
///   agent restarts are the caller's to skip, by sequence); records
///   overwritten before they were read (EPIPE) are reported through
///   `on_error` and reading continues with the oldest retained one.
/// - a FIFO: when the writer closes it, it is opened again, so a test can
///   write several times.
/// - a regular file: followed as it grows, like /dev/kmsg (checked every
///   100 ms at its end); one that shrinks or is replaced is read again from
///   its start. A last line without a newline is taken once the file has
///   not grown for one check.
///
/// Records become events through a kmsg_assembler (one per opening of the
/// path): several lines in one record, a notice over several records, the
/// parts of one sequence number, a backward jump (reported through
/// `on_error` and read).
///
/// A path that cannot be opened is reported through `on_error` (once per
/// distinct error, not on every retry) and retried with a back-off from
/// 1 s to 30 s. A line longer than 64 KiB is dropped (and reported).
/// Exceptions thrown by the callbacks are caught and reported through
/// `on_error`; nothing leaves the thread.
class kmsg_reader {
public:
  /// Nothing starts before start(). `on_error` and `on_caught_up` may be
  /// empty. `on_caught_up` is called once per start(), from the reader's
  /// thread, after every event of what the log held when it was first
  /// opened (the boot's ring buffer, the FIFO's waiting data, the file as it
  /// was) has been delivered: the agent's first discovery pass waits for
  /// it, so its first report already carries those faults.
  kmsg_reader(std::string path, std::function<void(gpu_event)> on_event,
              std::function<void(std::string)> on_error = nullptr,
              std::function<void()> on_caught_up = nullptr);
  /// Calls stop(). Must not run on the reader's own thread (from a
  /// callback).
  ~kmsg_reader();
  kmsg_reader(const kmsg_reader&) = delete;
  kmsg_reader& operator=(const kmsg_reader&) = delete;

  /// Starts the reading thread; does nothing while it runs. May be called
  /// again after stop(): it then reads from the start again. start()
  /// and stop() are for one owner thread, not to be called concurrently.
  void start();
  /// Ends the thread promptly (it waits in poll(2) on an eventfd that stop
  /// signals) and joins it; idempotent. Called from a callback, it only
  /// asks the thread to end after that callback returns.
  void stop();
  /// Complete lines read so far, records, continuation lines and dropped
  /// overlong lines alike, counted before the line's event is delivered.
  uint64_t lines_read() const;

private:
  void run();
  void report(const std::string& error);

  std::string path_;
  std::function<void(gpu_event)> on_event_;
  std::function<void(std::string)> on_error_;
  std::function<void()> on_caught_up_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> lines_{0};
  int wake_fd_ = -1;
};

} // namespace astraeus
