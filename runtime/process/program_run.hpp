#pragma once
/// @file
/// Running an outside program (nvidia-smi, dcgmi, fio) under a deadline and
/// capturing what it prints: the program runs in its own process group with
/// stdin from /dev/null, and at the deadline the whole group is killed. A
/// child stuck in the kernel (uninterruptible sleep in a driver) never holds
/// the caller past the deadline plus a short grace: it is reaped on a
/// detached thread. Nothing here throws except std::bad_alloc.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace astraeus {

/// What one run of a program gave.
struct run_outcome {
  /// The program was started (exec succeeded).
  bool started = false;
  /// Why it could not be started ("not found in PATH", "cannot run: ...").
  std::string error;
  /// It ran past the deadline and was killed.
  bool timed_out = false;
  /// It printed more than the output cap and was killed.
  bool overflow = false;
  /// It exited normally: exit_code is valid.
  bool exited = false;
  /// Its exit status when `exited`; -1 otherwise.
  int exit_code = -1;
  /// The signal that ended it, if any (0: none).
  int signal = 0;
  /// Its standard output and standard error as printed.
  std::string out;
  std::string err;
};

/// `program` itself when it holds a '/', else the first executable
/// $PATH/<program>; empty when none.
std::string resolve_program(const std::string& program);

/// Runs `program` (a path, or a name looked up in $PATH) with `args` until
/// it exits or `deadline`; its stdout and stderr together are capped at
/// `max_output_bytes` (4 MiB by default). Never throws for system errors:
/// they are in `error` with started false.
run_outcome run_program(const std::string& program, const std::vector<std::string>& args,
                        std::chrono::steady_clock::time_point deadline,
                        std::size_t max_output_bytes = std::size_t{4} << 20);

}  // namespace astraeus
