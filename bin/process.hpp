#pragma once
/// @file
/// What the long-running programs (controller, agent, dev) share: signal
/// handling and the mapping of command-line flags onto config keys.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace astraeus::bin {

/// Blocks SIGINT and SIGTERM in this thread and in every thread started
/// after it (call first in main), so `wait_for_stop_signal` can take them.
inline sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

/// Waits for SIGINT or SIGTERM; returns its number.
inline int wait_for_stop_signal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

/// Bounds the shutdown that follows a stop signal (issue 23 item 7): when
/// the process has not exited `bound` after this call (a detached actor or
/// thread that does not end, e.g. one blocked in a hung driver call, keeps
/// `caf::actor_system`'s destructor waiting), it logs so and ends with
/// `_exit(code)`. Nothing is lost: every acknowledged store write is synced,
/// and workers run in sessions of their own and keep running.
inline void bound_shutdown(const char* who, std::chrono::milliseconds bound, int code = 0) {
  std::thread{[who, bound, code] {
    std::this_thread::sleep_for(bound);
    spdlog::error("{}: still stopping after {} ms (a thread did not end): exiting now", who,
                  bound.count());
    spdlog::default_logger()->flush();
    // stdout and stderr only: fflush(nullptr) takes every stream's lock,
    // and a thread blocked reading a child's pipe (popen: an image's umoci
    // unpack) holds that stream's lock for as long as the child runs, so
    // the process never reached _exit (issue 23 item 7, "an image
    // unpacking").
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(code);
  }}.detach();
}

/// Config overrides collected from flags, as (key, value) pairs.
using overrides = std::vector<std::pair<std::string, std::string>>;

/// Splits each "key=value" of `--set`; a text without '=' becomes a key
/// with an empty value (the loader then names the key in its error).
inline void add_set_overrides(overrides& out,
                              const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos)
      out.emplace_back(s, "");
    else
      out.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
}

} // namespace astraeus::bin
