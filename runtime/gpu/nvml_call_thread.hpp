#pragma once
/// @file
/// The NVIDIA prober's call threads: one thread per GPU (and one for
/// driver-wide calls) runs a job of NVML calls while the prober watches each
/// call's deadline on the steady clock; a thread whose call hangs is
/// abandoned (detached) and outlives the prober safely.
/// Internal to the NVIDIA prober (runtime/gpu/nvml*.cpp).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "messages/astraeus.pb.h"
#include "runtime/gpu/nvml_abi.hpp"

namespace astraeus::nvml_abi {

using clock_type = std::chrono::steady_clock;

/// State shared by a worker thread and the prober. The thread keeps it
/// alive, so a worker left behind (abandoned) outlives the prober safely.
struct worker_state {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;  // the posted job, if has_job
  bool has_job = false;
  bool stop = false;
  bool abandoned = false;  // the prober stopped waiting; exit after the job
  bool exited = false;     // the thread is out of every NVML call for good
  uint64_t posted = 0;
  uint64_t finished = 0;
  const char* call = nullptr;  // the NVML call in flight, if any
  clock_type::time_point progress = clock_type::now();  // last call start/end
  // Identity a GPU job publishes as soon as it has it, so a GPU that hangs
  // later in the pass is still reported by UUID and address.
  v1::Gpu identity;
  bool has_identity = false;
};

/// Thrown inside a job when its worker was abandoned: stop calling NVML.
struct job_abandoned {};

/// The body of a worker thread: runs posted jobs until stopped or abandoned.
void worker_main(std::shared_ptr<worker_state> w);

/// A worker thread and its state.
struct worker {
  std::shared_ptr<worker_state> state = std::make_shared<worker_state>();
  std::thread thread;

  /// Starts the thread; counts it in `started`.
  explicit worker(std::atomic<std::size_t>& started);
  /// Stops and joins the thread unless it was abandoned (detached).
  ~worker();

  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  /// A worker whose call hung and has not returned yet.
  bool stuck();

  /// A worker whose call hung and has since returned: replace it.
  bool spent();

  /// What the stuck call is and how long it has been stuck.
  std::string stuck_detail(std::chrono::milliseconds deadline);

  /// Posts `job` to the thread; returns its sequence number. The deadline
  /// of its first call runs from now.
  uint64_t post(std::function<void()> job);

  /// Waits for job `seq`. Returns nullopt when it finished; otherwise the
  /// name of the call that overran `deadline` (the worker is then abandoned
  /// and its thread detached).
  std::optional<std::string> await(uint64_t seq, std::chrono::milliseconds deadline);
};

/// Runs one NVML call on the worker's thread (from inside a job), recording
/// it so the prober can time it. Throws job_abandoned when the prober gave
/// up on this worker while the call ran.
template <class F>
nvml_return timed(worker_state& w, const char* name, F&& f) {
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.call = name;
    w.progress = clock_type::now();
  }
  w.cv.notify_all();
  nvml_return rc = f();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.call = nullptr;
    w.progress = clock_type::now();
    if (w.abandoned)
      throw job_abandoned{};
  }
  return rc;
}

} // namespace astraeus::nvml_abi
