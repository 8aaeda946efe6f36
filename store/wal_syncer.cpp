#include "store/wal_syncer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include <pthread.h>
#include <sched.h>

#include <spdlog/spdlog.h>

namespace astraeus {

namespace {

/// Puts the calling thread under SCHED_FIFO at the lowest real-time
/// priority. Says once per process how that went (refused without root or
/// CAP_SYS_NICE, or in a cgroup with no real-time budget). With
/// SCHED_RESET_ON_FORK: a thread it starts (RocksDB starts its pool's
/// threads when a job is first scheduled, which a write may do) runs at
/// normal priority, not real-time.
bool run_at_realtime_priority() {
  sched_param p{};
  p.sched_priority = sched_get_priority_min(SCHED_FIFO);
  // pid 0: the calling thread (Linux schedules threads one by one).
  const int rc = sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &p) == 0 ? 0 : errno;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    if (rc == 0)
      spdlog::info("store: the sync thread runs at real-time priority (SCHED_FIFO {})",
                   p.sched_priority);
    else
      spdlog::info("store: the sync thread runs at normal priority (real-time refused: {})",
                   std::strerror(rc));
  }
  return rc == 0;
}

} // namespace

wal_syncer::wal_syncer(std::shared_ptr<Store> store, done_fn done, size_t writes_in_flight,
                       sync_priority priority)
  : store_(std::move(store)), done_(std::move(done)),
    writes_in_flight_(std::max<size_t>(writes_in_flight, 1)) {
  threads_.reserve(writes_in_flight_);
  for (size_t i = 0; i < writes_in_flight_; ++i)
    threads_.emplace_back([this, priority] {
      // Named for `top -H` and /proc/PID/task/*/comm (15 characters at most).
      pthread_setname_np(pthread_self(), "astraeus.wal");
      if (priority == sync_priority::realtime)
        run_at_realtime_priority();
      loop();
    });
}

wal_syncer::~wal_syncer() {
  {
    std::lock_guard<std::mutex> lock{mu_};
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void wal_syncer::request(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock{mu_};
    wanted_ = seq;
  }
  cv_.notify_one();
}

void wal_syncer::write_and_sync(uint64_t seq, std::vector<Store::change> changes) {
  write_and_sync(seq, std::move(changes), prepare_fn{});
}

void wal_syncer::write_and_sync(uint64_t seq, std::vector<Store::change> changes,
                                prepare_fn prepare) {
  {
    std::lock_guard<std::mutex> lock{mu_};
    writes_.push_back(pending_write{seq, std::move(changes), std::move(prepare)});
  }
  cv_.notify_one();
}

void wal_syncer::loop() {
  const bool one_thread = writes_in_flight_ == 1;
  for (;;) {
    uint64_t requested = 0;
    std::deque<pending_write> writes;
    {
      std::unique_lock<std::mutex> lock{mu_};
      cv_.wait(lock, [this] { return stop_ || wanted_ != 0 || !writes_.empty(); });
      if (stop_)
        return;
      requested = std::exchange(wanted_, 0);
      if (one_thread) {
        writes.swap(writes_);
      } else if (!writes_.empty()) {
        writes.push_back(std::move(writes_.front()));
        writes_.pop_front();
      }
    }
    // Every batch in order; the first failure fails the rest (not written).
    caf::error err;
    for (auto& w : writes) {
      if (err)
        break;
      if (w.prepare)
        w.prepare(w.changes);
      err = store_->write_chunked(w.changes, false);
    }
    if (!err)
      err = store_->sync_wal();
    for (auto& w : writes) {
      // What `prepare` holds goes before the batch is reported done.
      w.prepare = nullptr;
      done_(w.seq, err);
    }
    if (requested != 0)
      done_(requested, std::move(err));
  }
}

} // namespace astraeus
