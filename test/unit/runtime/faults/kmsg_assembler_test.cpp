// From kernel-log records to GPU events (runtime/faults/kmsg_assembler.cpp):
// the fallen-off-the-bus notice in every shape the driver logs it, the parts
// of one sequence number, and a backward jump within one read (issue 17,
// rules 3 and 10). Records are fed directly; the one file read is a real
// H200 VM's kernel log (test/fixtures/kmsg/h200-vm.txt).

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/faults/kmsg.hpp"
#include "runtime/faults/kmsg_assembler.hpp"
#include "runtime/faults/xid_policy.hpp"

using namespace astraeus;

namespace {

/// Feeds `lines` (each a /dev/kmsg or dmesg line) to one assembler; every
/// event, in order, and the warnings given.
struct fed {
  std::vector<gpu_event> events;
  std::vector<std::string> warnings;
};

fed feed(kmsg_assembler& a, const std::vector<std::string>& lines) {
  fed out;
  for (const auto& line : lines) {
    auto record = parse_kmsg_line(line);
    if (!record)
      continue;
    std::string warning;
    for (auto& ev : a.take(*record, &warning))
      out.events.push_back(std::move(ev));
    if (!warning.empty())
      out.warnings.push_back(warning);
  }
  return out;
}

fed feed(const std::vector<std::string>& lines) {
  kmsg_assembler a;
  return feed(a, lines);
}

} // namespace

TEST(KmsgAssembler, OneRecordWithSeveralLinesGivesAnEventPerLine) {
  // What r535+ logs for an Xid 79 as one /dev/kmsg record: "\x0a" between
  // the lines (the kernel's escape for a newline).
  auto got = feed({"4,900,5000000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, "
                   "GPU has fallen off the bus.\\x0aNVRM: GPU at PCI:0000:3a:00: "
                   "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32\\x0aNVRM: GPU Board Serial "
                   "Number: 1652823054003\\x0aNVRM: GPU 0000:3a:00.0: GPU has fallen off the bus."});
  ASSERT_EQ(got.events.size(), 3u);
  EXPECT_EQ(got.events[0].kind, gpu_event_kind::xid);
  EXPECT_EQ(got.events[0].xid, 79u);
  EXPECT_EQ(got.events[0].pci_address, "0000:3a:00.0");
  EXPECT_EQ(got.events[1].kind, gpu_event_kind::gpu_identity);
  EXPECT_EQ(got.events[1].uuid, "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32");
  EXPECT_EQ(got.events[2].kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(got.events[2].pci_address, "0000:3a:00.0");
  EXPECT_EQ(got.events[2].text, "NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.");
  // One sequence number, three parts.
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got.events[i].sequence, 900u);
    EXPECT_EQ(got.events[i].part, i);
  }
  EXPECT_TRUE(got.warnings.empty());
}

TEST(KmsgAssembler, ANoticeOverSeveralRecordsIsJoinedOntoItsFirst) {
  // Only the first record has the NVRM header and the address; the rest are
  // indented continuation records.
  auto got = feed({"3,700,100,-;NVRM: The NVIDIA GPU 0000:01:00.0",
                   "3,701,100,c;                (PCI ID: 10de:1eb8) installed in this system has",
                   "3,702,100,c;                fallen off the bus and is not responding to commands."});
  ASSERT_EQ(got.events.size(), 1u);
  EXPECT_EQ(got.events[0].kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(got.events[0].pci_address, "0000:01:00.0");
  EXPECT_EQ(got.events[0].sequence, 702u);
  EXPECT_NE(got.events[0].text.find("The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1eb8)"),
            std::string::npos)
      << got.events[0].text;

  // The same as plain dmesg lines, the continuation lines indented.
  got = feed({"[   12.345678] NVRM: The NVIDIA GPU 0000:01:00.0",
              "[   12.345679]                (PCI ID: 10de:1eb8) installed in this system has",
              "[   12.345680]                fallen off the bus and is not responding to commands."});
  ASSERT_EQ(got.events.size(), 1u);
  EXPECT_EQ(got.events[0].pci_address, "0000:01:00.0");

  // Each line with its own NVRM header, the later ones naming no address.
  got = feed({"3,800,100,-;NVRM: The NVIDIA GPU 0000:02:00.0",
              "3,801,100,-;NVRM: (PCI ID: 10de:1eb8) installed in this system has",
              "3,802,100,-;NVRM: fallen off the bus and is not responding to commands."});
  ASSERT_EQ(got.events.size(), 1u);
  EXPECT_EQ(got.events[0].kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(got.events[0].pci_address, "0000:02:00.0");
}

TEST(KmsgAssembler, TheOldOneLineFormIsAnEvent) {
  auto got = feed({"4,10,200,-;NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
                   "[  100.000001] NVRM: GPU at PCI:0000:41:00: GPU has fallen off the bus."});
  ASSERT_EQ(got.events.size(), 2u);
  EXPECT_EQ(got.events[0].kind, gpu_event_kind::fallen_off_bus);
  EXPECT_EQ(got.events[0].pci_address, "0000:01:00.0");
  EXPECT_EQ(got.events[1].pci_address, "0000:41:00.0");
}

TEST(KmsgAssembler, AnUnrelatedRecordEndsAPendingNotice) {
  // A record that names another address, then an indented line: nothing is
  // joined across it, and nothing made up.
  auto got = feed({"3,1,1,-;NVRM: The NVIDIA GPU 0000:01:00.0",
                   "6,2,2,-;usb 1-1: new high-speed USB device number 2",
                   "3,3,3,c;   fallen off the bus and is not responding to commands."});
  EXPECT_TRUE(got.events.empty());
}

TEST(KmsgAssembler, RecordsThatShareANumberAreNumberedParts) {
  // Two lines logged with the same sequence number (a message split by a
  // tool that kept its number): both events, parts 0 and 1.
  auto got = feed({"4,50,1,-;NVRM: Xid (PCI:0000:3a:00): 48, An uncorrectable double bit error",
                   "4,50,1,-;NVRM: Xid (PCI:0000:ba:00): 48, An uncorrectable double bit error",
                   "4,51,1,-;NVRM: Xid (PCI:0000:3a:00): 13, Graphics Exception"});
  ASSERT_EQ(got.events.size(), 3u);
  EXPECT_EQ(got.events[0].part, 0u);
  EXPECT_EQ(got.events[1].part, 1u);
  EXPECT_EQ(got.events[2].part, 0u);
  EXPECT_EQ(got.events[1].pci_address, "0000:ba:00.0");
  for (const auto& ev : got.events)
    EXPECT_FALSE(ev.after_jump);
}

TEST(KmsgAssembler, ABackwardJumpIsNamedOnceAndFlagsWhatFollows) {
  kmsg_assembler a;
  auto got = feed(a, {"4,2000,1,-;NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.",
                      "4,100,2,-;NVRM: Xid (PCI:0000:ba:00): 79, GPU has fallen off the bus.",
                      "4,101,3,-;NVRM: Xid (PCI:0000:ba:00): 13, Graphics Exception",
                      "4,50,4,-;NVRM: Xid (PCI:0000:ba:00): 13, Graphics Exception"});
  ASSERT_EQ(got.events.size(), 4u);
  EXPECT_FALSE(got.events[0].after_jump);
  EXPECT_TRUE(got.events[1].after_jump);
  EXPECT_TRUE(got.events[2].after_jump) << "every later event of the read is flagged";
  ASSERT_EQ(got.warnings.size(), 2u);
  EXPECT_NE(got.warnings[0].find("went back from 2000 to 100 within this boot"), std::string::npos)
      << got.warnings[0];
  // A new read (the path opened again) starts over: no jump.
  a.restart();
  got = feed(a, {"4,1,1,-;NVRM: Xid (PCI:0000:3a:00): 13, Graphics Exception"});
  ASSERT_EQ(got.events.size(), 1u);
  EXPECT_FALSE(got.events[0].after_jump);
  EXPECT_TRUE(got.warnings.empty());
}

TEST(KmsgAssembler, SplitsAtEscapedAndRealNewlines) {
  EXPECT_EQ(split_kmsg_lines("a\\x0ab\\x0A\\x0ac\nd"),
            (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(split_kmsg_lines(""), std::vector<std::string>{});
  EXPECT_EQ(split_kmsg_lines("\\x0"), std::vector<std::string>{"\\x0"});
}

// kmsg/h200-vm.txt: the whole /dev/kmsg of a real H200 VM (driver
// 580.159.04, bench/real_gpu_check.sh), 442 lines: the boot, the driver's
// own NVRM records (two flagged 'c'), dictionary lines, and one Xid 48 for
// 0000:00:06 that the run wrote into the log as root.
TEST(KmsgAssembler, TheRealH200VmLogHoldsOneXidAndNoOtherFault) {
  std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/kmsg/h200-vm.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  ASSERT_EQ(lines.size(), 442u);

  // The parser refuses no line: each is a record or a record's indented
  // dictionary line.
  size_t records = 0;
  for (const auto& line : lines) {
    if (parse_kmsg_line(line))
      ++records;
    else
      EXPECT_EQ(line.rfind(" ", 0), 0u) << "refused: " << line;
  }
  EXPECT_EQ(records, 358u);

  // NVRM's lines that are no Xid: records with their header read, no event.
  struct nvrm_line {
    size_t index;
    int priority;
    uint64_t sequence;
    uint64_t timestamp_us;
    std::string starts;
  };
  for (const auto& want : std::vector<nvrm_line>{
           {438, 3, 354, 553294, "NVRM: loading NVIDIA UNIX Open Kernel Module"},
           {439, 4, 355, 1106589, "NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100"},  // 'c'
           {440, 4, 356, 3527060, "NVRM: Persistence mode is deprecated"}}) {       // 'c'
    SCOPED_TRACE(lines[want.index]);
    auto record = parse_kmsg_line(lines[want.index]);
    ASSERT_TRUE(record);
    EXPECT_EQ(record->priority, want.priority);
    EXPECT_EQ(record->sequence, want.sequence);
    EXPECT_EQ(record->timestamp_us, want.timestamp_us);
    EXPECT_EQ(record->message.rfind(want.starts, 0), 0u) << record->message;
    EXPECT_FALSE(parse_gpu_event(*record));
  }

  auto got = feed(lines);
  EXPECT_TRUE(got.warnings.empty()) << got.warnings.front();
  ASSERT_EQ(got.events.size(), 1u);
  const auto& xid = got.events[0];
  EXPECT_EQ(xid.kind, gpu_event_kind::xid);
  EXPECT_EQ(xid.xid, 48u);
  EXPECT_EQ(xid.pci_address, "0000:00:06.0");
  EXPECT_EQ(xid.sequence, 357u);
  // A double-bit ECC error fences the GPU under the built-in policy.
  EXPECT_EQ(xid_policy{}.action(48), xid_action::fence);
}
