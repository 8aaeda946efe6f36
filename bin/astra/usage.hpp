#pragma once
/// @file
/// astra's words for a command line it cannot parse: the unknown command
/// or flag named, with the nearest known one ("unknown command 'machnes';
/// did you mean 'machines'?"), and the split at `--` that keeps options
/// from eating a run's command (`astra run --env K=V -- sh -c '…'`).
/// Issue 13 items 2 and 3.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/error.hpp>

namespace astraeus::cli {

/// astra's exit codes, the same for every command (listed in the README).
enum exit_code : int {
  /// The command did what it was asked.
  exit_ok = 0,
  /// The controller answered with an error (unknown machine, refused, …).
  exit_refused = 1,
  /// The command line or its input is wrong (unknown command or flag, a
  /// bad value, an unreadable file, a malformed --controller-key).
  exit_usage = 2,
  /// The controller could not be reached or did not answer in time.
  exit_unreachable = 3,
};

/// A check for a machine NAME argument by the controller's rule
/// (valid_machine_name): a bad name ("", "bad name!") is a usage error,
/// exit 2, before anything is sent.
CLI::Validator machine_name_check();

/// A check for a value by a rule of messages/labels.hpp (`rule` answers
/// none or the error naming what is wrong): a usage error, exit 2, before
/// anything is sent (the API token's --name).
CLI::Validator value_check(caf::error (*rule)(const std::string&));

/// A check for astra's `--timeout`: seconds from 0.1 to 3600, bare (`5`,
/// `0.5`) or with a unit, as kubectl's `--request-timeout` takes them
/// (`500ms`, `5s`, `2m`); the value is rewritten to plain seconds. Anything
/// else ("5h", "soon", "0") is a usage error, exit 2, naming the value.
CLI::Validator wait_time_check();

/// The entry of `known` nearest to `word`, when it is near enough to be
/// what was meant (at most 2 edits, or a third of the word's length for
/// long words, by Levenshtein distance), or `word` is a prefix of exactly one entry); empty otherwise.
std::string nearest(const std::string& word, const std::vector<std::string>& known);

/// A command line split at its first `--`: what CLI11 parses (the program
/// name first), and the command after it, untouched.
struct split_command_line {
  /// argv[0] and every argument before the first `--`.
  std::vector<std::string> head;
  /// Every argument after the first `--` (empty without one).
  std::vector<std::string> trailing;
  /// Whether a `--` was given.
  bool has_double_dash = false;
};

/// Splits `argv` (argc entries) at its first `--`.
split_command_line split_at_double_dash(int argc, const char* const* argv);

/// The message for a parse error of `app` on `head` (as split above): the
/// unknown command or flag named with the command it was given to and the
/// nearest known name; else CLI11's own message. Never empty.
std::string explain_usage_error(CLI::App& app, const std::vector<std::string>& head,
                                const CLI::ParseError& err);

} // namespace astraeus::cli
