#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/faults/kmsg.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

std::string fixture_path() {
  return std::string{ASTRAEUS_FIXTURES} + "/kmsg/lines.txt";
}

std::vector<std::string> fixture_lines() {
  std::ifstream in(fixture_path());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

/// What each line of test/fixtures/kmsg/lines.txt must give.
struct expected_line {
  bool record;                          // parse_kmsg_line gives a record
  int priority;                         // when a record
  uint64_t sequence;                    //
  uint64_t timestamp_us;                //
  std::optional<gpu_event_kind> kind;   // parse_gpu_event gives an event
  std::string pci;                      // when an event
  std::optional<uint32_t> xid;          //
};

using k = gpu_event_kind;
const std::vector<expected_line> expected = {
    // Xid 79, current driver.
    {true, 6, 1234, 5678901234, k::xid, "0000:3b:00.0", 79u},
    // Its dictionary: continuation lines, no records.
    {false, 0, 0, 0, std::nullopt, "", std::nullopt},
    {false, 0, 0, 0, std::nullopt, "", std::nullopt},
    // The records that follow an Xid 79: which GPU is at the address (an
    // identity event, no fault), the serial (no event).
    {true, 4, 1235, 5678901240, k::gpu_identity, "0000:3b:00.0", std::nullopt},
    {true, 4, 1236, 5678901241, std::nullopt, "", std::nullopt},
    // The Xid repeated, pid='<unknown>'.
    {true, 4, 1237, 5678901242, k::xid, "0000:3b:00.0", 79u},
    // Upper-case hex, folded.
    {true, 3, 1300, 5680000000, k::xid, "0000:3b:00.0", 48u},
    // Older driver: no "PCI:".
    {true, 4, 1301, 5680000100, k::xid, "0000:3b:00.0", 13u},
    // No pid at all.
    {true, 4, 1302, 5680000200, k::xid, "0000:86:00.0", 92u},
    // GSP timeout, domain 0002 kept, a caller= header field.
    {true, 4, 1303, 5680000300, k::xid, "0002:c1:00.0", 119u},
    // Plain dmesg line with a timestamp.
    {true, -1, 0, 12345678901, k::xid, "0000:3b:00.0", 74u},
    // Plain line, nothing but the message.
    {true, -1, 0, 0, k::xid, "0000:3b:00.0", 63u},
    // Fallen off the bus without an Xid, both wordings.
    {true, 0, 1400, 5690000000, k::fallen_off_bus, "0000:3b:00.0", std::nullopt},
    {true, 0, 1401, 5690000001, k::fallen_off_bus, "0000:db:00.0", std::nullopt},
    // AMD resets.
    {true, 6, 1500, 5700000000, k::amd_reset_begin, "0000:c1:00.0", std::nullopt},
    {true, 6, 1501, 5700000100, k::amd_reset_succeeded, "0000:c1:00.0", std::nullopt},
    {true, 3, 1502, 5700000200, k::amd_reset_failed, "0000:c1:00.0", std::nullopt},
    {true, 3, 1503, 5700000300, k::amd_reset_failed, "0000:c1:00.0", std::nullopt},
    // Ring timeouts: the old form names no device.
    {true, 3, 1504, 5700000400, k::amd_ring_timeout, "", std::nullopt},
    {true, 3, 1505, 5700000500, k::amd_ring_timeout, "0000:c1:00.0", std::nullopt},
    // Other records: no events.
    {true, 6, 1506, 5700000600, std::nullopt, "", std::nullopt},
    {true, 6, 1600, 5710000000, std::nullopt, "", std::nullopt},
    {true, 12, 1601, 5710000001, std::nullopt, "", std::nullopt},
};

/// The events the fixture must give, in order.
std::vector<gpu_event> expected_events() {
  std::vector<gpu_event> events;
  auto lines = fixture_lines();
  for (size_t i = 0; i < lines.size() && i < expected.size(); ++i)
    if (expected[i].kind)
      events.push_back(*parse_gpu_event(*parse_kmsg_line(lines[i])));
  return events;
}

std::optional<gpu_event> event_of(std::string_view line) {
  auto record = parse_kmsg_line(line);
  return record ? parse_gpu_event(*record) : std::nullopt;
}

bool is_valid_utf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : (byte & 0xe0) == 0xc0 ? 2 : (byte & 0xf0) == 0xe0 ? 3
                                    : (byte & 0xf8) == 0xf0 ? 4 : 0;
    if (length == 0 || i + length > text.size())
      return false;
    for (size_t k = 1; k < length; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80)
        return false;
    i += length;
  }
  return true;
}

/// "dddd:bb:dd.f" in lower case, or empty.
bool is_pci_address_or_empty(const std::string& pci) {
  if (pci.empty())
    return true;
  if (pci.size() < 12)
    return false;
  size_t domain = pci.size() - 8;
  for (size_t i = 0; i < pci.size(); ++i) {
    char c = pci[i];
    bool sep = i == domain || i == domain + 3;
    if (sep ? c != ':' : i == domain + 6 ? c != '.' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  }
  return true;
}

/// A directory that is removed with everything in it.
class scratch_dir {
public:
  scratch_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "astraeus-kmsg-XXXXXX").string();
    if (auto* p = ::mkdtemp(tmpl.data()))
      path_ = p;
  }
  ~scratch_dir() {
    std::error_code err;
    if (!path_.empty())
      std::filesystem::remove_all(path_, err);
  }
  const std::string& path() const {
    return path_;
  }

private:
  std::string path_;
};

/// Collects a reader's callbacks; waits for them with a deadline.
class collector {
public:
  void event(gpu_event e) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
    changed_.notify_all();
  }
  void error(std::string e) {
    std::lock_guard lock(mutex_);
    errors_.push_back(std::move(e));
    changed_.notify_all();
  }
  bool wait_for_events(size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return events_.size() >= n; });
  }
  bool wait_for_errors(size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return errors_.size() >= n; });
  }
  std::vector<gpu_event> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::vector<std::string> errors() {
    std::lock_guard lock(mutex_);
    return errors_;
  }
  std::function<void(gpu_event)> on_event() {
    return [this](gpu_event e) { event(std::move(e)); };
  }
  std::function<void(std::string)> on_error() {
    return [this](std::string e) { error(std::move(e)); };
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<gpu_event> events_;
  std::vector<std::string> errors_;
};

/// Opens a FIFO for writing, waiting at most `timeout` for its reader.
int open_writer(const std::string& path, std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO || std::chrono::steady_clock::now() > deadline)
      return -1;
    std::this_thread::sleep_for(1ms);  // no reader yet (it reopens after a writer's close)
  }
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    auto n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void expect_same_events(const std::vector<gpu_event>& got, const std::vector<gpu_event>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i) + ": " + want[i].text);
    EXPECT_EQ(got[i].kind, want[i].kind);
    EXPECT_EQ(got[i].pci_address, want[i].pci_address);
    EXPECT_EQ(got[i].xid, want[i].xid);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].sequence, want[i].sequence);
    EXPECT_EQ(got[i].timestamp_us, want[i].timestamp_us);
  }
}

} // namespace

TEST(Kmsg, ParsesEveryLineShapeInTheFixture) {
  auto lines = fixture_lines();
  ASSERT_EQ(lines.size(), expected.size()) << fixture_path();
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1) + ": " + lines[i]);
    const auto& want = expected[i];
    auto record = parse_kmsg_line(lines[i]);
    ASSERT_EQ(record.has_value(), want.record);
    if (!record)
      continue;
    EXPECT_EQ(record->priority, want.priority);
    EXPECT_EQ(record->sequence, want.sequence);
    EXPECT_EQ(record->timestamp_us, want.timestamp_us);
    auto event = parse_gpu_event(*record);
    ASSERT_EQ(event.has_value(), want.kind.has_value());
    if (!event)
      continue;
    EXPECT_EQ(event->kind, *want.kind);
    EXPECT_EQ(event->pci_address, want.pci);
    EXPECT_EQ(event->xid, want.xid);
    EXPECT_EQ(event->sequence, want.sequence);
    EXPECT_EQ(event->timestamp_us, want.timestamp_us);
    // The message as logged, header and timestamp removed.
    EXPECT_EQ(event->text, record->message);
    EXPECT_TRUE(event->text.rfind("NVRM: ", 0) == 0 || event->text.rfind("amdgpu ", 0) == 0
                || event->text.rfind("[drm:amdgpu_", 0) == 0);
  }
}

TEST(Kmsg, SplitsTheKmsgHeader) {
  auto r = parse_kmsg_line("6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 6);
  EXPECT_EQ(r->sequence, 1234u);
  EXPECT_EQ(r->timestamp_us, 5678901234u);
  EXPECT_EQ(r->message, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234");

  // CRLF, a "c" flag, extra header fields, a ';' inside the message.
  r = parse_kmsg_line("4,7,8,c,caller=T12,future=1;a;b\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 4);
  EXPECT_EQ(r->message, "a;b");

  // An empty message is still a record; facility 1 kept in the priority.
  r = parse_kmsg_line("14,0,0,-;");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 14);
  EXPECT_EQ(r->priority & 7, 6);
  EXPECT_EQ(r->message, "");

  // Largest numbers that fit.
  r = parse_kmsg_line("2147483647,18446744073709551615,18446744073709551615,-;x");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 2147483647);
  EXPECT_EQ(r->sequence, 18446744073709551615u);
}

TEST(Kmsg, ParsesPlainDmesgLines) {
  auto r = parse_kmsg_line("[    0.000001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, -1);
  EXPECT_EQ(r->sequence, 0u);
  EXPECT_EQ(r->timestamp_us, 1u);
  EXPECT_EQ(r->message, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module");

  // dmesg -r with a raw priority; a caller id (CONFIG_PRINTK_CALLER).
  r = parse_kmsg_line("<3>[12345.5][ T1234] amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 3);
  EXPECT_EQ(r->timestamp_us, 12345500000u);
  EXPECT_EQ(r->message, "amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!");
  r = parse_kmsg_line("[   12.000000] [    C3] hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, "hello");

  // A bracket that is no timestamp is part of the message.
  r = parse_kmsg_line("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->timestamp_us, 0u);
  EXPECT_EQ(r->message, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1");
  auto e = parse_gpu_event(*r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_ring_timeout);
  EXPECT_EQ(e->pci_address, "");

  // Digits without the kmsg comma are just text.
  r = parse_kmsg_line("3 GPUs found");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, "3 GPUs found");
  r = parse_kmsg_line("-6,1,2,-;x");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, "-6,1,2,-;x");
}

// A kernel-log file is often a syslog file (found by a helper: these lines
// never fenced, silently): /var/log/kern.log in rsyslog's traditional and
// RFC 3339 formats, `journalctl -k`, and `dmesg -T`.
TEST(Kmsg, ReadsTheKernelsLinesInSyslogFilesAndDmesgT) {
  const std::string xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has "
                          "fallen off the bus.";
  struct shape {
    std::string line;
    uint64_t timestamp_us;
  };
  for (const auto& c : std::vector<shape>{
         {"Dec  6 22:00:00 gpu-01 kernel: [  700.123456] " + xid, 700123456},
         {"2026-12-06T22:00:00.123456+00:00 gpu-01 kernel: [  700.123456] " + xid, 700123456},
         {"Dec 06 22:00:00 gpu-01 kernel: " + xid, 0},
         {"[Sun Dec  6 22:00:00 2026] " + xid, 0},
       }) {
    auto r = parse_kmsg_line(c.line);
    ASSERT_TRUE(r) << c.line;
    EXPECT_EQ(r->message, xid) << c.line;
    EXPECT_EQ(r->timestamp_us, c.timestamp_us) << c.line;
    auto e = parse_gpu_event(*r);
    ASSERT_TRUE(e) << c.line;
    EXPECT_EQ(e->kind, gpu_event_kind::xid);
    EXPECT_EQ(e->xid, 79u);
    EXPECT_EQ(e->pci_address, "0000:3b:00.0");
  }
  // Another program's line that quotes the driver is no event: only the
  // kernel's own lines lose their syslog prefix.
  auto r = parse_kmsg_line("Dec  6 22:00:00 gpu-01 sudo: echo NVRM: Xid (PCI:0000:3b:00): 79");
  ASSERT_TRUE(r);
  EXPECT_FALSE(parse_gpu_event(*r));
}

// Such files keep the lines of earlier boots: each line's wall-clock time
// is read, so that those fence nothing (fault_latches::on_event).
TEST(Kmsg, ReadsTheWallClockTimeOfSyslogAndDmesgTLines) {
  const std::string xid = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.";
  auto wall_of = [&](const std::string& line) {
    auto r = parse_kmsg_line(line);
    EXPECT_TRUE(r) << line;
    auto e = r ? parse_gpu_event(*r) : std::nullopt;
    EXPECT_TRUE(e) << line;
    return e ? e->wall : std::nullopt;
  };
  // 2026-12-06 22:00:00 UTC.
  constexpr int64_t at = 1796594400000;
  auto utc = wall_of("2026-12-06T22:00:00.123456+00:00 gpu-01 kernel: [  700.123456] " + xid);
  ASSERT_TRUE(utc);
  EXPECT_EQ(resolve_wall_time(*utc, at), at);
  auto paris = wall_of("2026-12-06T23:00:00+01:00 gpu-01 kernel: " + xid);
  ASSERT_TRUE(paris);
  EXPECT_EQ(resolve_wall_time(*paris, at), at) << "the zone is applied";
  auto zulu = wall_of("2026-12-06T22:00:00Z gpu-01 kernel: " + xid);
  ASSERT_TRUE(zulu);
  EXPECT_EQ(resolve_wall_time(*zulu, at), at);

  // Local time (no zone in the line): the machine's, here UTC.
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  for (const auto& line : {"Dec  6 22:00:00 gpu-01 kernel: [  700.123456] " + xid,
                           "Dec 06 22:00:00 gpu-01 kernel: " + xid,
                           "[Sun Dec  6 22:00:00 2026] " + xid}) {
    auto w = wall_of(line);
    ASSERT_TRUE(w) << line;
    EXPECT_EQ(resolve_wall_time(*w, at + 3600000), at) << line;
  }
  // No year: December's line read on January 2nd is last year's.
  auto december = wall_of("Dec 31 23:00:00 gpu-01 kernel: " + xid);
  ASSERT_TRUE(december);
  constexpr int64_t jan_2_2027 = 1798848000000;  // 2027-01-02 00:00:00 UTC
  EXPECT_EQ(resolve_wall_time(*december, jan_2_2027), jan_2_2027 - 25 * 3600000LL);

  // A plain line or a /dev/kmsg record carries no wall time; a prefix that
  // is not a date leaves the line a record all the same.
  EXPECT_FALSE(wall_of("[  700.123456] " + xid));
  EXPECT_FALSE(wall_of("6,1234,700123456,-;" + xid));
  EXPECT_FALSE(wall_of("Foo  6 22:00:00 gpu-01 kernel: " + xid));
  EXPECT_FALSE(wall_of("Dec  6 22:0:00 gpu-01 kernel: " + xid));
  auto feb_30 = wall_of("Feb 30 10:00:00 gpu-01 kernel: " + xid);
  ASSERT_TRUE(feb_30) << "read as written";
  EXPECT_FALSE(resolve_wall_time(*feb_30, at)) << "a date that does not exist";
}

TEST(Kmsg, IgnoresContinuationAndEmptyLines) {
  EXPECT_FALSE(parse_kmsg_line(" SUBSYSTEM=pci"));
  EXPECT_FALSE(parse_kmsg_line(" DEVICE=+pci:0000:3b:00.0\n"));
  EXPECT_FALSE(parse_kmsg_line("\tX=Y"));
  EXPECT_FALSE(parse_kmsg_line(" NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."));
  EXPECT_FALSE(parse_kmsg_line(""));
  EXPECT_FALSE(parse_kmsg_line("\n"));
  EXPECT_FALSE(parse_kmsg_line("\r\n"));
}

TEST(Kmsg, KeepsThePciDomain) {
  auto a = event_of("4,1,1,-;NVRM: Xid (PCI:0002:c1:00): 119, pid=1, name=x, Timeout");
  auto b = event_of("4,2,1,-;NVRM: Xid (PCI:0000:c1:00): 119, pid=1, name=x, Timeout");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->pci_address, "0002:c1:00.0");
  EXPECT_EQ(b->pci_address, "0000:c1:00.0");
  // VMD domains have five digits.
  auto vmd = event_of("NVRM: Xid (PCI:10000:01:00): 79, GPU has fallen off the bus.");
  ASSERT_TRUE(vmd);
  EXPECT_EQ(vmd->pci_address, "10000:01:00.0");
  auto amd = event_of("amdgpu 0001:05:00.0: amdgpu: GPU reset begin!");
  ASSERT_TRUE(amd);
  EXPECT_EQ(amd->pci_address, "0001:05:00.0");
}

TEST(Kmsg, FoldsHexCase) {
  for (auto line : {"NVRM: Xid (PCI:0000:3B:00): 48, DBE", "NVRM: Xid (pci:0000:3b:00): 48, DBE",
                    "NVRM: Xid (0000:3B:00): 48, DBE", "NVRM: Xid (PCI:0000:3b:00): 48, DBE"}) {
    auto e = event_of(line);
    ASSERT_TRUE(e) << line;
    EXPECT_EQ(e->pci_address, "0000:3b:00.0") << line;
    EXPECT_EQ(e->xid, 48u);
  }
  auto e = event_of("NVRM: Xid (PCI:ABCD:EF:1F): 31, pid=1, MMU Fault");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->pci_address, "abcd:ef:1f.0");
  e = event_of("amdgpu 0000:C1:00.0: amdgpu: GPU reset begin!");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->pci_address, "0000:c1:00.0");
}

TEST(Kmsg, RecognisesDriverVariants) {
  // An Xid id that carries a function; an Xid at the end of the message.
  auto e = event_of("NVRM: Xid (PCI:0000:3b:00.0): 94, pid=9, Contained ECC error");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->pci_address, "0000:3b:00.0");
  EXPECT_EQ(e->xid, 94u);
  e = event_of("NVRM: Xid (PCI:0000:3b:00): 154");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->xid, 154u);
  // Older "GPU at PCI:" wording of the bus notice; and one naming no GPU.
  e = event_of("NVRM: GPU at PCI:0000:5e:00: GPU has fallen off the bus.");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(e->pci_address, "0000:5e:00.0");
  e = event_of("NVRM: fallen off the bus and is not responding to commands.");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(e->pci_address, "");
  EXPECT_FALSE(e->xid);
  // amdgpu without the inner "amdgpu: " (older kernels) and with a drm tag.
  e = event_of("amdgpu 0000:c1:00.0: GPU reset succeeded, trying to resume");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_reset_succeeded);
  e = event_of("amdgpu 0000:c1:00.0: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring comp_1.0.0 timeout, "
               "signaled seq=1, emitted seq=3");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_ring_timeout);
  EXPECT_EQ(e->pci_address, "0000:c1:00.0");
  // dev_err since Linux 6.10 (amdgpu's dev_fmt adds "amdgpu: ").
  e = event_of("amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=8, emitted seq=9");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_ring_timeout);
  EXPECT_EQ(e->pci_address, "0000:c1:00.0");
  e = event_of("[drm:amdgpu_job_timedout] *ERROR* ring sdma1 timeout, but soft recovered");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_ring_timeout);
}

TEST(Kmsg, AmdFatalMessagesInOldAndNewWordings) {
  auto e = event_of("3,1,1,-;amdgpu 0000:c1:00.0: amdgpu: VRAM is lost due to GPU reset!");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_vram_lost);
  EXPECT_EQ(e->pci_address, "0000:c1:00.0");
  for (auto line : {"amdgpu 0000:c1:00.0: amdgpu: 1 uncorrectable hardware errors detected in UMC block",
                    "amdgpu 0000:c1:00.0: amdgpu: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
                    "amdgpu 0000:c1:00.0: amdgpu: RAS: Fatal error event happened"}) {
    e = event_of(line);
    ASSERT_TRUE(e) << line;
    EXPECT_EQ(e->kind, gpu_event_kind::amd_ras_fatal) << line;
    EXPECT_EQ(e->pci_address, "0000:c1:00.0");
  }
  // Lines that name no device are kept, with no address.
  e = event_of("[drm:amdgpu_device_gpu_recover [amdgpu]] *ERROR* GPU reset(1) failed");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_reset_failed);
  EXPECT_EQ(e->pci_address, "");
  e = event_of("[drm:amdgpu_device_gpu_recover [amdgpu]] VRAM is lost due to GPU reset!");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::amd_vram_lost);
  EXPECT_STREQ(to_string(gpu_event_kind::amd_vram_lost), "amd_vram_lost");
  EXPECT_STREQ(to_string(gpu_event_kind::amd_ras_fatal), "amd_ras_fatal");
}

TEST(Kmsg, AGpuAtPciLineLinksTheAddressToItsUuid) {
  auto e = event_of("4,1235,1,-;NVRM: GPU at PCI:0000:3b:00: GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, gpu_event_kind::gpu_identity);
  EXPECT_EQ(e->pci_address, "0000:3b:00.0");
  EXPECT_EQ(e->uuid, "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_STREQ(to_string(gpu_event_kind::gpu_identity), "gpu_identity");
  EXPECT_EQ(gpu_uuid_in("x GPU-12 GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b."),
            "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(gpu_uuid_in("MIG-GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5bx"), "");
  // Without a UUID it is no event.
  EXPECT_FALSE(event_of("NVRM: GPU at PCI:0000:3b:00: unknown"));
}

TEST(Kmsg, OtherMessagesAreNoEvents) {
  for (auto line : {
           "NVRM: GPU Board Serial Number: 1652922001234",
           "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
           "amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!",
           "amdgpu 0000:c1:00.0: amdgpu: GPU reset end with ret = 0",
           "[drm] ring gfx timeout",
           "[drm:i915_hangcheck [i915]] *ERROR* ring rcs0 timeout",
           "[drm:radeon_fence_check_lockup [radeon]] *ERROR* ring 0 timeout",
           "amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 test failed (-110)",
           // Text that only quotes a driver line is not from the driver.
           "audit: type=1105 msg='cmd=echo NVRM: Xid (PCI:0000:3b:00): 79, fake'",
           "kernel: NVRM: Xid (PCI:0000:3b:00): 79, fake",
       }) {
    auto r = parse_kmsg_line(line);
    ASSERT_TRUE(r) << line;
    EXPECT_FALSE(parse_gpu_event(*r)) << line;
  }
}

TEST(Kmsg, GarbageGivesNullopt) {
  for (auto line : {"6,12", "6,12,", "6,12,34", "6,12,34;x", "6,,34,-;x", "6,a,34,-;x",
                    "99999999999999999999,1,2,-;x", "2147483648,1,2,-;x", "6,99999999999999999999,2,-;x",
                    "6,1,18446744073709551616,-;x", "[99999999999999999999.000000] x",
                    "[18446744073709.551616] x", "[12.] x", "[12.1234567890] x", "[12.5 x", "<6 x",
                    "<99999999999> x", " ", "   \t "}) {
    EXPECT_FALSE(parse_kmsg_line(line)) << line;
  }
  for (auto message : {
           "NVRM: Xid (PCI:zzzz): x", "NVRM: Xid (PCI:0000:3b:00): x", "NVRM: Xid (PCI:0000:3b:00): ",
           "NVRM: Xid (PCI:0000:3b:00): 99999999999", "NVRM: Xid (PCI:0000:3b:00): 79x",
           "NVRM: Xid (PCI:0000:3b:0): 79", "NVRM: Xid (PCI:000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:20): 79",
           "NVRM: Xid (PCI:0000:3b:00", "NVRM: Xid (PCI:0000:3b:00)", "NVRM: Xid (", "NVRM: Xid ", "NVRM:",
           "NVRM: Xid (PCI:0000:3b:00.9): 79", "NVRM: Xid (PCI:0000:3b:001): 79",
           "amdgpu zzzz:c1:00.0: amdgpu: GPU reset begin!", "amdgpu 0000:c1:00: amdgpu: GPU reset begin!",
           "amdgpu 0000:c1:00.0 amdgpu: GPU reset begin!", "amdgpu 0000:c1:00.0:", "amdgpu ",
           "amdgpu 0000:c1:00.0: amdgpu: GPU reset(x) failed", "amdgpu 0000:c1:00.0: amdgpu: GPU reset(2",
           "amdgpu 0000:c1:00.0: [drm] *ERROR* ring  timeout", "[drm:", "[drm:amdgpu", "[drm:amdgpu]",
       }) {
    kmsg_record record;
    record.message = message;
    EXPECT_FALSE(parse_gpu_event(record)) << message;
  }
}

TEST(Kmsg, RandomBytesNeverCrash) {
  // Deterministic: random bytes, and fixture lines with random bytes
  // flipped, cut or spliced.
  auto lines = fixture_lines();
  uint64_t state = 0x9e3779b97f4a7c15u;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t events = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string line;
    if (round % 2 == 0) {
      line.resize(next() % 200);
      for (auto& c : line)
        c = static_cast<char>(next());
    } else {
      line = lines[next() % lines.size()];
      for (int flips = static_cast<int>(next() % 4); flips > 0 && !line.empty(); --flips)
        line[next() % line.size()] = static_cast<char>(next());
      if (next() % 3 == 0)
        line.resize(next() % (line.size() + 1));
    }
    auto record = parse_kmsg_line(line);
    kmsg_record raw;
    raw.message = line;
    for (const auto* r : {record ? &*record : nullptr, &raw}) {
      if (!r)
        continue;
      if (auto e = parse_gpu_event(*r)) {
        ++events;
        EXPECT_LE(e->text.size(), 512u);
        EXPECT_TRUE(is_valid_utf8(e->text));
        EXPECT_TRUE(is_pci_address_or_empty(e->pci_address)) << e->pci_address;
        EXPECT_EQ(e->xid.has_value(), e->kind == gpu_event_kind::xid);
      }
    }
  }
  EXPECT_GT(events, 0u);  // the mutations left some lines intact
}

TEST(Kmsg, EventTextIsTrimmedBoundedAndValidUtf8) {
  // 511 bytes, then "é" (2 bytes) across the 512-byte limit: cut before it.
  std::string message = "NVRM: Xid (PCI:0000:3b:00): 13, ";
  message += std::string(511 - message.size(), 'a') + "\xC3\xA9" + "tail";
  auto e = event_of("4,1,2,-;  " + message + "   ");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text.size(), 511u);
  EXPECT_EQ(e->text, message.substr(0, 511));

  // Bytes that are not UTF-8 become U+FFFD.
  e = event_of("NVRM: Xid (PCI:0000:3b:00): 13, bad \xff\xfe byte");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text, "NVRM: Xid (PCI:0000:3b:00): 13, bad \xEF\xBF\xBD\xEF\xBF\xBD byte");
  EXPECT_TRUE(is_valid_utf8(e->text));
}

TEST(Kmsg, NamesEventKinds) {
  EXPECT_STREQ(to_string(gpu_event_kind::xid), "xid");
  EXPECT_STREQ(to_string(gpu_event_kind::fallen_off_bus), "fallen_off_bus");
  EXPECT_STREQ(to_string(gpu_event_kind::amd_reset_begin), "amd_reset_begin");
  EXPECT_STREQ(to_string(gpu_event_kind::amd_reset_succeeded), "amd_reset_succeeded");
  EXPECT_STREQ(to_string(gpu_event_kind::amd_reset_failed), "amd_reset_failed");
  EXPECT_STREQ(to_string(gpu_event_kind::amd_ring_timeout), "amd_ring_timeout");
  EXPECT_STREQ(to_string(static_cast<gpu_event_kind>(99)), "unknown");
}

TEST(Kmsg, ReaderReadsAllOfARegularFile) {
  scratch_dir dir;
  auto lines = fixture_lines();
  std::string path = dir.path() + "/kmsg.txt";
  {
    std::ofstream out(path, std::ios::binary);
    for (const auto& line : lines)
      out << line << '\n';
    // A last line without a newline: the end of the file ends it.
    out << "6,9999,1,-;NVRM: Xid (PCI:0000:01:00): 31, sentinel";
  }
  collector got;
  kmsg_reader reader(path, got.on_event(), got.on_error());
  reader.start();
  auto want = expected_events();
  ASSERT_TRUE(got.wait_for_events(want.size() + 1));
  auto events = got.events();
  EXPECT_EQ(events.back().text, "NVRM: Xid (PCI:0000:01:00): 31, sentinel");
  events.pop_back();
  expect_same_events(events, want);
  EXPECT_EQ(reader.lines_read(), lines.size() + 1);
  // Stopped and started again, it reads the file again.
  reader.stop();
  reader.start();
  ASSERT_TRUE(got.wait_for_events(2 * (want.size() + 1)));
  reader.stop();
  EXPECT_TRUE(got.errors().empty());
}

TEST(Kmsg, ReaderFollowsAFifoAcrossWriterReopens) {
  scratch_dir dir;
  std::string path = dir.path() + "/kmsg";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto lines = fixture_lines();
  auto want = expected_events();

  collector got;
  kmsg_reader reader(path, got.on_event(), got.on_error());
  reader.start();

  // Writer 1 writes the first half and closes; writer 2 opens at once and
  // writes the rest in small pieces, cutting lines apart; writer 3 comes
  // after the events arrived and writes the fixture again.
  std::string first, second;
  for (size_t i = 0; i < lines.size(); ++i)
    (i < lines.size() / 2 ? first : second) += lines[i] + "\n";
  std::thread writer([&] {
    int fd = open_writer(path);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(write_all(fd, first));
    ::close(fd);
    fd = open_writer(path);
    ASSERT_GE(fd, 0);
    for (size_t at = 0; at < second.size(); at += 7)
      EXPECT_TRUE(write_all(fd, std::string_view(second).substr(at, 7)));
    ::close(fd);
  });
  writer.join();
  ASSERT_TRUE(got.wait_for_events(want.size()));
  expect_same_events(got.events(), want);

  std::thread again([&] {
    int fd = open_writer(path);
    ASSERT_GE(fd, 0);
    // A last event, so that every line before it was counted when it comes.
    EXPECT_TRUE(write_all(fd, first + second + "NVRM: Xid (PCI:0000:01:00): 31, sentinel\n"));
    ::close(fd);
  });
  again.join();
  ASSERT_TRUE(got.wait_for_events(2 * want.size() + 1));
  auto events = got.events();
  EXPECT_EQ(events.back().text, "NVRM: Xid (PCI:0000:01:00): 31, sentinel");
  expect_same_events(std::vector<gpu_event>(events.begin() + static_cast<long>(want.size()), events.end() - 1),
                     want);
  EXPECT_EQ(reader.lines_read(), 2 * lines.size() + 1);

  auto before = std::chrono::steady_clock::now();
  reader.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  EXPECT_TRUE(got.errors().empty());
}

TEST(Kmsg, ReaderStopsPromptlyWithoutAWriter) {
  scratch_dir dir;
  std::string path = dir.path() + "/kmsg";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  collector got;
  auto reader = std::make_unique<kmsg_reader>(path, got.on_event(), got.on_error());
  reader->start();
  reader->start();  // a second start does nothing
  int fd = open_writer(path);  // proves the reader has the FIFO open
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto before = std::chrono::steady_clock::now();
  reader->stop();
  reader->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  // Started again, and ended by the destructor.
  reader->start();
  fd = open_writer(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  before = std::chrono::steady_clock::now();
  reader.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  EXPECT_TRUE(got.events().empty());
  EXPECT_TRUE(got.errors().empty());
}

TEST(Kmsg, ReaderReportsAPathItCannotOpenOnce) {
  scratch_dir dir;
  collector got;
  kmsg_reader reader(dir.path() + "/missing", got.on_event(), got.on_error());
  reader.start();
  ASSERT_TRUE(got.wait_for_errors(1));
  auto before = std::chrono::steady_clock::now();
  reader.stop();  // while it waits to retry
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  auto errors = got.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("/missing: cannot open: No such file or directory"), std::string::npos)
      << errors[0];
}

TEST(Kmsg, ReaderDropsOverlongLinesAndCallbackExceptions) {
  scratch_dir dir;
  std::string path = dir.path() + "/kmsg.txt";
  {
    std::ofstream out(path, std::ios::binary);
    out << "NVRM: Xid (PCI:0000:3b:00): 79, " << std::string(70000, 'x') << "\n";
    out << "NVRM: Xid (PCI:0000:3b:00): 13, throws\n";
    out << "NVRM: Xid (PCI:0000:3b:00): 31, last\n";
  }
  collector got;
  kmsg_reader reader(
      path,
      [&](gpu_event e) {
        if (e.xid == 13u)
          throw std::runtime_error("callback");
        got.event(std::move(e));
      },
      got.on_error());
  reader.start();
  ASSERT_TRUE(got.wait_for_events(1));
  auto events = got.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].xid, 31u);
  ASSERT_TRUE(got.wait_for_errors(2));
  auto errors = got.errors();
  EXPECT_NE(errors[0].find("dropped a line longer than 65536 bytes"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("callback threw"), std::string::npos) << errors[1];
  EXPECT_EQ(reader.lines_read(), 3u);
}

TEST(Kmsg, ReaderReadsDevKmsgFromItsBeginning) {
  int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    GTEST_SKIP() << "/dev/kmsg is not readable here";
  ::close(fd);
  collector got;
  kmsg_reader reader("/dev/kmsg", got.on_event(), got.on_error());
  reader.start();
  // The log holds at least the kernel's first lines from boot.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reader.lines_read() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_GT(reader.lines_read(), 0u);
  auto before = std::chrono::steady_clock::now();
  reader.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  for (const auto& e : got.events())
    EXPECT_TRUE(is_pci_address_or_empty(e.pci_address));
}
