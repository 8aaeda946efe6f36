#include "runtime/process/wake_stealing.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

#include <caf/atom.hpp>
#include <caf/defaults.hpp>
#include <caf/detail/double_ended_queue.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/timespan.hpp>

namespace astraeus {
namespace {

/// The scheduler policy (caf/policy/scheduler_policy.hpp's interface) of
/// wake_stealing.hpp's comment.
class wake_stealing : public caf::policy::unprofiled {
public:
  using queue_type = caf::detail::double_ended_queue<caf::resumable>;

  /// Shared by the workers: round-robin placement of jobs from outside, and
  /// the one sleep every idle worker waits in.
  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {
    }
    std::atomic<size_t> next_worker{0};
    /// Workers in (or about to enter) `cv`'s wait: an enqueue takes `lock`
    /// and notifies only when this is non-zero.
    std::atomic<size_t> sleepers{0};
    std::mutex lock;
    std::condition_variable cv;
  };

  /// A worker's queue (others steal from its tail) and its spin settings.
  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* p)
      : spin_attempts(caf::get_or(p->config(), "work-stealing.aggressive-poll-attempts",
                                  caf::defaults::work_stealing::aggressive_poll_attempts)),
        steal_interval(caf::get_or(p->config(), "work-stealing.aggressive-steal-interval",
                                   caf::defaults::work_stealing::aggressive_steal_interval)),
        max_sleep(caf::get_or(p->config(), "work-stealing.relaxed-sleep-duration",
                              caf::defaults::work_stealing::relaxed_sleep_duration)) {
      if (steal_interval == 0)
        steal_interval = 1;
    }
    // The worker copies the coordinator's `init` data: settings, not jobs.
    worker_data(const worker_data& other)
      : spin_attempts(other.spin_attempts), steal_interval(other.steal_interval),
        max_sleep(other.max_sleep) {
    }
    queue_type queue;
    size_t spin_attempts;
    size_t steal_interval;
    caf::timespan max_sleep;
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto* w = self->worker_by_id(d(self).next_worker++ % self->num_workers());
    w->external_enqueue(job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    d(self).queue.append(job);
    wake_one(self->parent());
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    d(self).queue.prepend(job);
    wake_one(self->parent());
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    d(self).queue.append(job);
    wake_one(self->parent());
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& wd = d(self);
    for (;;) {
      for (size_t i = 0; i < wd.spin_attempts; ++i) {
        if (auto* job = wd.queue.take_head())
          return job;
        if (i % wd.steal_interval == 0)
          if (auto* job = steal(self))
            return job;
      }
      auto& cd = d(self->parent());
      std::unique_lock<std::mutex> guard(cd.lock);
      cd.sleepers.fetch_add(1);
      // Pairs with wake_one's fence: this look at the queues, or that
      // enqueuer's look at the count, sees the other's write.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // An enqueue before the count went up did not notify: look again.
      auto* job = take(self);
      if (job == nullptr) {
        cd.cv.wait_for(guard, wd.max_sleep);
        job = take(self);
      }
      cd.sleepers.fetch_sub(1);
      if (job != nullptr)
        return job;
    }
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    for (auto* job = d(self).queue.take_head(); job != nullptr; job = d(self).queue.take_head())
      f(job);
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator*, UnaryFunction) {
    // Every job is in a worker's queue.
  }

private:
  /// After a job went into a queue: wakes one sleeping worker, if any. The
  /// seq_cst fence against the sleeper's seq_cst increment: either this sees
  /// the sleeper counted, or the sleeper's look after counting sees the job.
  template <class Coordinator>
  static void wake_one(Coordinator* c) {
    auto& cd = d(c);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (cd.sleepers.load() == 0)
      return;
    std::lock_guard<std::mutex> guard(cd.lock);
    cd.cv.notify_one();
  }

  /// Another worker's oldest job, trying each other worker once.
  template <class Worker>
  static caf::resumable* steal(Worker* self) {
    auto* p = self->parent();
    const size_t n = p->num_workers();
    for (size_t k = 1; k < n; ++k)
      if (auto* job = d(p->worker_by_id((self->id() + k) % n)).queue.take_tail())
        return job;
    return nullptr;
  }

  /// This worker's newest job, else another's oldest.
  template <class Worker>
  static caf::resumable* take(Worker* self) {
    if (auto* job = d(self).queue.take_head())
      return job;
    return steal(self);
  }
};

} // namespace

caf::actor_system::module* make_scheduler(caf::actor_system& sys) {
  const auto policy = caf::get_or(sys.config(), "scheduler.policy",
                                  caf::defaults::scheduler::policy);
  if (policy == caf::atom("testing"))
    return new caf::scheduler::test_coordinator(sys);
  if (policy == caf::atom("sharing"))
    return new caf::scheduler::coordinator<caf::policy::work_sharing>(sys);
  return new caf::scheduler::coordinator<wake_stealing>(sys);
}

void use_wake_stealing(caf::actor_system_config& cfg) {
  cfg.module_factories.push_back(&make_scheduler);
}

} // namespace astraeus
