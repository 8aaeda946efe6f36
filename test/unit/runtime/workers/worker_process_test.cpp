// A worker's process (runtime/workers/worker_process.cpp): stop signals by
// name or number, OOM kills read from the container's memory cgroup, and its
// log read across rotation. Source: shared/seeds/inside-a-worker.md, issue 6.

#include <sys/wait.h>

#include <gtest/gtest.h>

#include "runtime/workers/worker_process.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

TEST(Signals, ParsesNamesAndNumbers) {
  EXPECT_EQ(*parse_signal("SIGTERM"), 15);
  EXPECT_EQ(*parse_signal("int"), 2);
  EXPECT_EQ(*parse_signal("9"), 9);
  EXPECT_FALSE(parse_signal("SIGNOPE"));
  EXPECT_FALSE(parse_signal("0"));
}

// OOMKilled is read from the container's memory cgroup (issue 6, "Limits"):
// runc's state names the cgroup; the kernel's counter says whether it killed.
TEST(OomKills, ReadFromTheCgroupV2MemoryEventsRuncNamed) {
  test::temp_dir dir;
  auto runc_root = dir.path() + "/runc";
  auto host = dir.path() + "/host";
  write(fs::path{runc_root} / "astraeus-hog-0/state.json",
        R"({"id":"astraeus-hog-0","cgroup_paths":{"":"/sys/fs/cgroup/agent/astraeus-hog-0"}})");
  auto cg = runc_memory_cgroup(runc_root, "astraeus-hog-0");
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/sys/fs/cgroup/agent/astraeus-hog-0");
  write(fs::path{host + *cg} / "memory.events",
        "low 0\nhigh 0\nmax 1742\noom 3\noom_kill 2\noom_group_kill 0\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 2u) << "the kernel killed twice";
  write(fs::path{host + *cg} / "memory.events", "low 0\nhigh 0\nmax 9\noom 0\noom_kill 0\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 0u) << "at its limit, never killed";
}

TEST(OomKills, CgroupV1AndHybridHostsReadMemoryOomControl) {
  test::temp_dir dir;
  auto runc_root = dir.path() + "/runc";
  auto host = dir.path() + "/host";
  // A hybrid host (as runc 1.1 records it): "" is the unified hierarchy,
  // which has no memory controller there.
  write(fs::path{runc_root} / "astraeus-w/state.json",
        R"({"cgroup_paths":{"":"/sys/fs/cgroup/unified/astraeus-w",)"
        R"("cpu":"/sys/fs/cgroup/cpu/a/astraeus-w",)"
        R"("memory":"/sys/fs/cgroup/memory/a/astraeus-w"}})");
  auto cg = runc_memory_cgroup(runc_root, "astraeus-w");
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/sys/fs/cgroup/memory/a/astraeus-w");
  write(fs::path{host + *cg} / "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 1u);
}

TEST(OomKills, UnknownWhenRuncKeptNoRecordOrTheCgroupIsGone) {
  test::temp_dir dir;
  EXPECT_FALSE(runc_memory_cgroup(dir.path(), "astraeus-none"));
  write(fs::path{dir.path()} / "astraeus-bad/state.json", "not json");
  EXPECT_FALSE(runc_memory_cgroup(dir.path(), "astraeus-bad"));
  EXPECT_FALSE(cgroup_oom_kills("/sys/fs/cgroup/gone", dir.path()));
}

// Worker logs are capped and rotated (log, log.1); a reader's offset counts
// every byte the worker wrote, so following it reads each byte once.
TEST(WorkerLog, ReadsAcrossRotationByPositionInTheWholeOutput) {
  test::temp_dir dir;
  // 10 bytes were rotated away twice: log.1 holds bytes 6..9, log 10..13.
  write(fs::path{dir.path()} / "log.1", "ghij");
  write(fs::path{dir.path()} / "log", "klmn");
  write(fs::path{dir.path()} / "log.start", "10\n");
  auto at = [&](uint64_t offset, uint32_t max) {
    auto p = read_log_piece(dir.path(), offset, max);
    EXPECT_TRUE(p);
    return p ? std::make_pair(p->data, p->next_offset) : std::make_pair(std::string{}, uint64_t{0});
  };
  EXPECT_EQ(at(0, 100), std::make_pair(std::string{"ghij"}, uint64_t{10}))
    << "older output is gone: from the oldest byte kept";
  EXPECT_EQ(at(7, 2), std::make_pair(std::string{"hi"}, uint64_t{9}));
  EXPECT_EQ(at(9, 100), std::make_pair(std::string{"j"}, uint64_t{10}));
  EXPECT_EQ(at(10, 100), std::make_pair(std::string{"klmn"}, uint64_t{14}));
  EXPECT_EQ(at(14, 100), std::make_pair(std::string{}, uint64_t{14})) << "nothing new yet";
  EXPECT_EQ(at(99, 100), std::make_pair(std::string{}, uint64_t{14}))
    << "past the end (a log started again): its end";
  // Never rotated: log alone, from 0.
  test::temp_dir fresh;
  write(fs::path{fresh.path()} / "log", "abc");
  auto p = read_log_piece(fresh.path(), 0, 100);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->data, "abc");
  EXPECT_EQ(p->next_offset, 3u);
  EXPECT_FALSE(read_log_piece(fresh.path() + "/none", 0, 100));
}

// issue 22: a host-process worker runs on the cores it was given.
TEST(WorkerLaunch, AHostProcessRunsOnTheCoresItWasGiven) {
  test::temp_dir dir;
  process_launch what;
  what.argv = {"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  what.env = {"PATH=/usr/bin:/bin"};
  what.dir = dir.path();
  what.cpus = {0};
  auto launched = launch_process(what);
  ASSERT_TRUE(launched) << render_error(launched.error());
  int status = 0;
  ASSERT_EQ(::waitpid(launched->shim_pid, &status, 0), launched->shim_pid);
  auto log = read(fs::path{dir.path()} / "log");
  EXPECT_NE(log.find("Cpus_allowed_list:\t0\n"), std::string::npos) << log;
}
