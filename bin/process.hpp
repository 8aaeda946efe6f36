#pragma once
/// @file
/// What the long-running programs (controller, agent, dev) share: signal
/// handling and the mapping of command-line flags onto config keys.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
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

/// Runs `parse()` (which calls CLI11's parse). Returns nullopt to go on, or
/// the code to exit with: CLI11's after --help or --version (printed), else
/// `on_error(e)`'s for a usage error `e` (it prints what was wrong).
template <class Parse, class OnError>
std::optional<int> parse_or_exit(CLI::App& app, Parse&& parse, OnError&& on_error) {
  try {
    parse();
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return on_error(e);
  }
}

/// Parses the command line for the program `who`. Returns nullopt to go
/// on, or the code to exit with: 0 after --help (printed), 2 after a usage
/// error, printed as "who: what was wrong" with the way to help; an unknown
/// subcommand is named with the known ones ("astraeus: unknown subcommand
/// 'bogus' (known: dev, version)"), not CLI11's "A subcommand is required".
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const char* who) {
  return parse_or_exit(
    app, [&] { app.parse(argc, argv); },
    [&](const CLI::ParseError& e) {
      auto known = app.get_subcommands([](const CLI::App*) { return true; });
      std::string what = e.what();
      if (!known.empty() && argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool found = false;
        for (const auto* sub : known) {
          names += (names.empty() ? "" : ", ") + sub->get_name();
          found = found || sub->get_name() == argv[1];
        }
        if (!found)
          what = std::string{"unknown subcommand '"} + argv[1] + "' (known: " + names + ")";
      }
      std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", who,
                   what.c_str());
      return 2;
    });
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
