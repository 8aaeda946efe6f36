// The scheduler's group commit with the fsync on a thread of its own
// (issue 14, `scheduler_config::background_sync`): the syncer alone, then a
// scheduler with it in a real threaded actor system (the deterministic
// coordinator cannot drive a thread of its own), whose answers come only
// once their runs are on disk and whose failed writes tell nobody.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

#include "actor_fixture.hpp"
#include "snapshot_fixtures.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "store/wal_syncer.hpp"
#include "messages/error.hpp"
#include "runtime/process/system_setup.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

std::shared_ptr<Store> open_store(const std::string& path) {
  auto s = Store::open(path);
  if (!s) {
    ADD_FAILURE() << render_error(s.error());
    return nullptr;
  }
  return std::shared_ptr<Store>{std::move(*s)};
}

/// A machine `name` with 8 GPUs "<name>-gpu<i>".
v1::SchedulerMachine machine_of(const std::string& name) {
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i)
    ids.push_back(name + "-gpu" + std::to_string(i));
  return test::fixture_machine(name, ids);
}

/// The stored run `name`, if any (ASSERTs that the store answered).
std::optional<v1::Run> stored(Store& db, const std::string& name) {
  v1::Run out;
  auto found = db.get(family::runs, name, out);
  EXPECT_TRUE(found) << render_error(found.error());
  if (!found || !*found)
    return std::nullopt;
  return out;
}

/// A threaded actor system with the scheduler on `db`, background sync on.
struct threaded_scheduler {
  explicit threaded_scheduler(std::shared_ptr<Store> db)
    : sys{(register_astraeus_types(cfg), cfg.set("scheduler.max-threads", 2), cfg)} {
    scheduler_config sc;
    sc.store = std::move(db);
    sc.background_sync = true;
    sched = sys.spawn(scheduler, std::move(sc));
  }
  ~threaded_scheduler() {
    caf::scoped_actor self{sys};
    self->send_exit(sched, caf::exit_reason::user_shutdown);
    self->wait_for(sched);
  }
  caf::actor_system_config cfg;
  caf::actor_system sys;
  scheduler_actor sched;
};

} // namespace

TEST(WalSyncer, ReportsEachRequestAfterSyncing) {
  test::temp_dir dir;
  auto db = open_store(dir.path() + "/s");
  ASSERT_TRUE(db);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> done;
  {
    wal_syncer syncer{db, [&](uint64_t seq, caf::error err) {
                        EXPECT_FALSE(err) << render_error(err);
                        std::lock_guard<std::mutex> lock{mu};
                        done.push_back(seq);
                        cv.notify_all();
                      }};
    ASSERT_FALSE(db->put_raw(family::runs, "a", "x", false));
    syncer.request(1);
    std::unique_lock<std::mutex> lock{mu};
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds{30}, [&] { return !done.empty(); }));
    EXPECT_EQ(done.front(), 1u);
  }
  // Stopped with the syncer; nothing more is reported.
  EXPECT_EQ(done.size(), 1u);
}

TEST(SchedulerBackgroundSync, AnswersBurstsOnlyOnceStoredAndKeepsTheirState) {
  test::temp_dir dir;
  auto db = open_store(dir.path() + "/controller");
  ASSERT_TRUE(db);
  threaded_scheduler t{db};
  caf::scoped_actor self{t.sys};
  for (int m = 0; m < 4; ++m)
    self->send(t.sched, machine_of("gpu-0" + std::to_string(m)));
  // 40 one-GPU runs in flight at once: 32 fit, 8 wait.
  constexpr int runs = 40;
  for (int i = 0; i < runs; ++i)
    self->send(t.sched, atom::submit_v, test::fixture_run("r" + std::to_string(i), 1));
  int answered = 0;
  self->receive_for(answered, runs)(
    [](v1::Run& run) { EXPECT_TRUE(run.state() == "Placed" || run.state() == "Waiting"); },
    [](caf::error& err) { FAIL() << render_error(err); });
  std::set<std::string> placed, waiting;
  for (int i = 0; i < runs; ++i) {
    auto name = "r" + std::to_string(i);
    auto run = stored(*db, name);
    ASSERT_TRUE(run) << name << " answered but not stored";
    (run->state() == "Placed" ? placed : waiting).insert(name);
  }
  EXPECT_EQ(placed.size(), 32u);
  EXPECT_EQ(waiting.size(), 8u);
  // Removing a placed run answers it Stopped, erased from the store; a
  // waiting run takes its GPU.
  auto gone = *placed.begin();
  self->request(t.sched, caf::infinite, atom::remove_v, gone)
    .receive([](v1::Run& run) { EXPECT_EQ(run.state(), "Stopped"); },
             [](caf::error& err) { FAIL() << render_error(err); });
  EXPECT_FALSE(stored(*db, gone)) << gone << " is still stored";
  size_t now_placed = 0;
  self->request(t.sched, caf::infinite, atom::runs_v)
    .receive(
      [&](v1::RunList& list) {
        for (const auto& r : list.runs())
          now_placed += r.state() == "Placed";
        EXPECT_EQ(list.runs_size(), runs - 1);
      },
      [](caf::error& err) { FAIL() << render_error(err); });
  EXPECT_EQ(now_placed, 32u);
}

TEST(SchedulerBackgroundSync, AFailedWriteTellsNobodyAndIsWrittenAgain) {
  test::temp_dir dir;
  auto db = open_store(dir.path() + "/controller");
  ASSERT_TRUE(db);
  threaded_scheduler t{db};
  caf::scoped_actor self{t.sys};
  self->send(t.sched, machine_of("gpu-01"));
  db->faults().fail_next_writes(1);
  self->request(t.sched, caf::infinite, atom::submit_v, test::fixture_run("first", 1))
    .receive([](v1::Run& run) { FAIL() << "answered " << run.ShortDebugString(); },
             [](caf::error& err) { EXPECT_EQ(err.code(), static_cast<uint8_t>(ec::store_failure)); });
  // The next change writes the run the failed write left out.
  self->request(t.sched, caf::infinite, atom::submit_v, test::fixture_run("second", 1))
    .receive([](v1::Run& run) { EXPECT_EQ(run.state(), "Placed"); },
             [](caf::error& err) { FAIL() << render_error(err); });
  for (const char* name : {"first", "second"})
    EXPECT_TRUE(stored(*db, name)) << name << " is not stored";
}
