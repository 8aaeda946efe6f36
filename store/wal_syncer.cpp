#include "store/wal_syncer.hpp"

#include <algorithm>
#include <utility>

namespace astraeus {

wal_syncer::wal_syncer(std::shared_ptr<Store> store, done_fn done)
  : store_(std::move(store)), done_(std::move(done)) {
  thread_ = std::thread{[this] { loop(); }};
}

wal_syncer::~wal_syncer() {
  {
    std::lock_guard<std::mutex> lock{mu_};
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void wal_syncer::request(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock{mu_};
    wanted_ = seq;
  }
  cv_.notify_one();
}

void wal_syncer::write_and_sync(uint64_t seq, std::vector<Store::change> changes) {
  {
    std::lock_guard<std::mutex> lock{mu_};
    writes_.emplace_back(seq, std::move(changes));
  }
  cv_.notify_one();
}

void wal_syncer::loop() {
  for (;;) {
    uint64_t seq = 0;
    std::deque<std::pair<uint64_t, std::vector<Store::change>>> writes;
    {
      std::unique_lock<std::mutex> lock{mu_};
      cv_.wait(lock, [this] { return stop_ || wanted_ != 0 || !writes_.empty(); });
      if (stop_)
        return;
      seq = std::exchange(wanted_, 0);
      writes.swap(writes_);
    }
    // Every batch in order; the first failure fails the rest (not written).
    caf::error err;
    for (auto& [n, changes] : writes) {
      seq = std::max(seq, n);
      if (!err)
        err = store_->write_chunked(changes, false);
    }
    if (!err)
      err = store_->sync_wal();
    done_(seq, std::move(err));
  }
}

} // namespace astraeus
