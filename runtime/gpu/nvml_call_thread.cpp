// The NVIDIA prober's call threads (see nvml_call_thread.hpp).

#include "runtime/gpu/nvml_call_thread.hpp"

namespace astraeus::nvml_abi {

void worker_main(std::shared_ptr<worker_state> w) {
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    w->cv.wait(lock, [&] { return w->stop || w->has_job; });
    if (w->has_job) {
      auto job = std::move(w->job);
      w->job = nullptr;
      w->has_job = false;
      lock.unlock();
      try {
        job();
      } catch (...) {
      }
      job = nullptr;
      lock.lock();
      w->call = nullptr;
      ++w->finished;
      w->cv.notify_all();
      if (w->abandoned)
        break;
      continue;
    }
    if (w->stop)
      break;
  }
  w->exited = true;
  w->cv.notify_all();
}

worker::worker(std::atomic<std::size_t>& started) {
  thread = std::thread(worker_main, state);
  ++started;
}

worker::~worker() {
  if (!thread.joinable())
    return;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stop = true;
  }
  state->cv.notify_all();
  thread.join();
}

bool worker::stuck() {
  std::lock_guard<std::mutex> lock(state->mu);
  return state->abandoned && !state->exited;
}

bool worker::spent() {
  std::lock_guard<std::mutex> lock(state->mu);
  return state->abandoned && state->exited;
}

std::string worker::stuck_detail(std::chrono::milliseconds deadline) {
  std::lock_guard<std::mutex> lock(state->mu);
  auto for_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() -
                                                                      state->progress);
  return std::string(state->call ? state->call : "an NVML call") + " has not returned for " +
         std::to_string(for_ms.count()) + " ms (deadline " + std::to_string(deadline.count()) +
         " ms)";
}

uint64_t worker::post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(state->mu);
  state->progress = clock_type::now();  // the deadline runs from here
  state->job = std::move(job);
  state->has_job = true;
  state->cv.notify_all();
  return ++state->posted;
}

std::optional<std::string> worker::await(uint64_t seq, std::chrono::milliseconds deadline) {
  std::unique_lock<std::mutex> lock(state->mu);
  for (;;) {
    if (state->finished >= seq)
      return std::nullopt;
    auto due = state->progress + deadline;
    if (clock_type::now() >= due) {
      state->abandoned = true;
      std::string call = state->call ? state->call : "an NVML call";
      lock.unlock();
      if (thread.joinable())
        thread.detach();
      return call;
    }
    state->cv.wait_until(lock, due);
  }
}

} // namespace astraeus::nvml_abi
