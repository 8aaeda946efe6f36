// A worker started once, whatever instant the agent is killed at (issue 23,
// item 3; runtime/workers/worker_start.cpp): the marker in a worker's
// environment, its main process told apart from its descendants, and how a
// restarted agent resolves a record left `Starting`, on fixture /proc trees.

#include <gtest/gtest.h>

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include "runtime/workers/worker_start.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

namespace {

/// A process of the fixture /proc under `root`: stat (state S, or `state`)
/// and an environment holding `env` entries.
void fixture_process(const std::string& root, pid_t pid, pid_t ppid, pid_t pgid, pid_t sid,
                     uint64_t start, const std::vector<std::string>& env,
                     const char* state = "S") {
  auto dir = fs::path{root} / "proc" / std::to_string(pid);
  // Fields 1..22: pid (comm) state ppid pgrp session tty tpgid flags
  // minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
  // threads itrealvalue starttime.
  write(dir / "stat", std::to_string(pid) + " (sleep) " + state + " " + std::to_string(ppid)
                        + " " + std::to_string(pgid) + " " + std::to_string(sid)
                        + " 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 " + std::to_string(start)
                        + " 1000 100\n");
  std::string text;
  for (const auto& e : env)
    text += e + '\0';
  write(dir / "environ", text);
}

const std::string marker = "train-0.00c0ffee00c0ffee";
const std::string tag = std::string{worker_start_variable} + "=" + marker;

/// The shim (100, unmarked), the worker's main process (101), a child in
/// its group (102), and a child that left with setsid (103, handed to the
/// shim when its parent ended).
void worker_tree(const std::string& root, bool with_main = true) {
  fixture_process(root, 100, 1, 100, 100, 5000, {"PATH=/bin"});
  if (with_main)
    fixture_process(root, 101, 100, 101, 100, 5001, {"PATH=/bin", tag, "RANK=0"});
  fixture_process(root, 102, 101, 101, 100, 5002, {tag});
  fixture_process(root, 103, 100, 103, 103, 5003, {tag});
  // Another worker's process, and one whose marker only begins like ours.
  fixture_process(root, 200, 1, 200, 1, 4000,
                  {std::string{worker_start_variable} + "=other-0.1"});
  fixture_process(root, 201, 100, 201, 100, 4000, {tag + "ff"});
}

v1::WorkerProcess starting_record(const std::string& dir) {
  v1::WorkerProcess rec;
  rec.set_worker("train-0");
  rec.set_dir(dir);
  rec.set_start_marker(marker);
  set_starting(rec);
  return rec;
}

} // namespace

TEST(WorkerStart, MarkersAreUniquePerStartAndNameTheWorker) {
  auto a = new_start_marker("train-0");
  auto b = new_start_marker("train-0");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("train-0.", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string{"train-0."}.size() + 16);
  v1::WorkerProcess rec;
  set_starting(rec);
  EXPECT_TRUE(is_starting(rec));
  rec.set_state_code(v1::WorkerState::running);
  EXPECT_FALSE(is_starting(rec)) << "a typed state wins over the word";
}

TEST(WorkerStart, FindsTheProcessesThatCarryTheMarkerAndTheirMain) {
  temp_dir dir;
  worker_tree(dir.path());
  fixture_process(dir.path(), 104, 101, 101, 100, 5004, {tag}, "Z");  // a zombie: gone
  auto marked = processes_with_marker(marker, dir.path());
  std::vector<pid_t> pids;
  for (const auto& p : marked)
    pids.push_back(p.pid);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<pid_t>{101, 102, 103})) << "whole entries only; no zombie";
  auto main = main_of_marked(marked);
  ASSERT_TRUE(main);
  EXPECT_EQ(main->pid, 101);
  EXPECT_EQ(main->ppid, 100) << "its parent is the shim";
  EXPECT_EQ(main->start_ticks, 5001u);
}

TEST(WorkerStart, WithoutItsMainProcessNoDescendantPassesForIt) {
  temp_dir dir;
  worker_tree(dir.path(), false);
  // 102 is in the main's group, 103 leads a session of its own.
  EXPECT_FALSE(main_of_marked(processes_with_marker(marker, dir.path())));
}

TEST(WorkerStart, ARecordLeftStartingIsAdoptedWaitedForEndedOrStartedOnce) {
  temp_dir dir;
  auto proc = dir.path() + "/root";
  auto wdir = dir.path() + "/workers/train-0";
  fs::create_directories(wdir);
  auto rec = starting_record(wdir);
  // No trace: the agent died before the fork.
  EXPECT_EQ(resolve_start(rec, proc).outcome, start_outcome::not_started);
  // The shim holds the lock; the worker has not reached exec.
  int fd = ::open(start_lock_path(wdir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_TRUE(start_lock_held(wdir));
  EXPECT_EQ(resolve_start(rec, proc).outcome, start_outcome::wait);
  // It runs: adopted, with the shim as its parent.
  worker_tree(proc);
  auto found = resolve_start(rec, proc);
  EXPECT_EQ(found.outcome, start_outcome::adopt);
  EXPECT_EQ(found.main.pid, 101);
  EXPECT_EQ(found.main.ppid, 100);
  // It ran and ended: the shim wrote its exit file and let go of the lock.
  fs::remove_all(fs::path{proc} / "proc");
  write(fs::path{wdir} / "exit", "exit 0\n");
  EXPECT_EQ(resolve_start(rec, proc).outcome, start_outcome::wait)
    << "the lock is read first: the shim may still be writing";
  ::close(fd);
  EXPECT_FALSE(start_lock_held(wdir));
  EXPECT_EQ(resolve_start(rec, proc).outcome, start_outcome::ended);
  EXPECT_STREQ(to_string(start_outcome::not_started), "not started");
}
