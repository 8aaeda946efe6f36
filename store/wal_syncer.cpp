#include "store/wal_syncer.hpp"

#include <algorithm>
#include <utility>

namespace astraeus {

wal_syncer::wal_syncer(std::shared_ptr<Store> store, done_fn done, size_t writes_in_flight)
  : store_(std::move(store)), done_(std::move(done)),
    writes_in_flight_(std::max<size_t>(writes_in_flight, 1)) {
  threads_.reserve(writes_in_flight_);
  for (size_t i = 0; i < writes_in_flight_; ++i)
    threads_.emplace_back([this] { loop(); });
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
