#include "store/wal_syncer.hpp"

#include <utility>

#include "store/store.hpp"

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

void wal_syncer::loop() {
  for (;;) {
    uint64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock{mu_};
      cv_.wait(lock, [this] { return stop_ || wanted_ != 0; });
      if (stop_)
        return;
      seq = std::exchange(wanted_, 0);
    }
    done_(seq, store_->sync_wal());
  }
}

} // namespace astraeus
