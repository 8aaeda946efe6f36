#pragma once
/// @file
/// Small text helpers shared by the readers of procfs, sysfs and program
/// output (host facts, the AMD sysfs reader, the PCI bus scan, nvidia-smi):
/// reading a whole small file, trimming, splitting into lines, strict
/// number parsing and lower-casing. Pure functions apart from
/// read_small_file(); nothing here throws except std::bad_alloc.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astraeus {

/// The characters trim() removes: space, tab, newline, carriage return,
/// form feed and vertical tab (the "C" locale's isspace set).
inline constexpr std::string_view text_whitespace = " \t\n\r\f\v";

/// `text` without leading and trailing text_whitespace; a view into `text`.
/// Empty when `text` is empty or all whitespace.
std::string_view trim(std::string_view text);

/// Whether `text` begins with `prefix` (always true for an empty prefix).
bool starts_with(std::string_view text, std::string_view prefix);

/// Whether `text` is one or more ASCII digits '0'-'9' and nothing else;
/// false for empty text, signs, spaces.
bool all_digits(std::string_view text);

/// `text` with ASCII 'A'-'Z' lower-cased; other bytes (UTF-8 included)
/// unchanged. Empty for empty text.
std::string ascii_lower(std::string_view text);

/// The pieces of `text` between `sep` characters, untrimmed, empty pieces
/// kept: "a,,b" -> {"a", "", "b"}; "" -> {""}; "a," -> {"a", ""}. Views
/// into `text`.
std::vector<std::string_view> split(std::string_view text, char sep);

/// The lines of `text` split at '\n', untrimmed (a "\r" stays), blank lines
/// kept, no trailing empty line after a final '\n': "a\n\nb\n" ->
/// {"a", "", "b"}; "" -> {}. Views into `text`.
std::vector<std::string_view> split_lines(std::string_view text);

/// The lines of `text` split at '\n', each trim()med, lines that are then
/// empty dropped: " a \n\n b" -> {"a", "b"}; "", "\n \n" -> {}. Views into
/// `text`.
std::vector<std::string_view> nonblank_lines(std::string_view text);

/// The whole of `text`, surrounding whitespace ignored (a sysfs value's
/// trailing newline), as an unsigned decimal number. nullopt for empty or
/// all-whitespace text, a sign ("+1", "-1"), inner spaces, trailing garbage
/// ("12abc", "1.5") or a value over UINT64_MAX.
std::optional<uint64_t> parse_u64(std::string_view text);

/// As parse_u64() for a signed decimal number: "-1" is -1; "+1", empty,
/// garbage or a value outside int64_t give nullopt.
std::optional<int64_t> parse_i64(std::string_view text);

/// The whole of `text`, surrounding whitespace ignored, as a hexadecimal
/// number with an optional "0x"/"0X" prefix ("0x10de\n", "10DE"). nullopt
/// for empty text, a bare "0x", non-hex characters or a value over
/// UINT32_MAX.
std::optional<uint32_t> parse_hex_u32(std::string_view text);

/// The whole of `text` as a finite decimal number ("1.5", "-2", "1e3"),
/// locale-independent. Unlike the integer parsers, surrounding whitespace
/// is NOT skipped: trim() first where it may occur. nullopt for empty text,
/// whitespace, trailing garbage, "inf", "nan" or an out-of-range value.
std::optional<double> parse_double(std::string_view text);

/// What read_small_file() found.
struct small_file {
  /// errno of open(2) or read(2); 0 when the file was read to its end (or
  /// to max_bytes, see too_large). ENOENT or ENOTDIR with opened false: the
  /// file is absent.
  int error = 0;
  /// Whether open(2) succeeded: an error with opened true came from read(2)
  /// (sysfs attributes fail at read time: EINVAL for a down link's speed,
  /// EIO, ENODEV, EOPNOTSUPP).
  bool opened = false;
  /// The file holds more than max_bytes: reading stopped and `text` holds
  /// its first max_bytes bytes; error stays 0.
  bool too_large = false;
  /// The contents as read, byte for byte (not trimmed, not checked for
  /// UTF-8); empty when error is not 0, and for an empty file.
  std::string text;
};

/// Reads the file at `path` with plain open(2)/read(2) (no buffering
/// library, so a sysfs attribute's read errno is kept), retrying EINTR.
/// A missing file gives error ENOENT, an empty file an empty text with
/// error 0, a garbage file its bytes as they are; never throws for I/O.
small_file read_small_file(const std::string& path, std::size_t max_bytes = std::size_t{1} << 20);

/// The prefix to put before absolute paths ("/sys/...") to read them under
/// `root`: `root` without trailing '/' characters, and "" for "/" (or "",
/// or only slashes), so "/" reads this machine and "/tmp/fixture/" reads
/// "/tmp/fixture/sys/...".
std::string root_prefix(std::string_view root);

/// `text` with every byte sequence that is not valid UTF-8 replaced by
/// U+FFFD. Host files may hold any bytes (a Latin-1 mount point, a garbage
/// model), but proto3 string fields must be UTF-8 or the receiver cannot
/// parse the whole report; read_host_facts passes every string through this.
std::string to_valid_utf8(std::string_view text);

/// Levenshtein distance between `a` and `b` (insertions, deletions and
/// substitutions of one byte each), for "did you mean ...?" hints.
size_t edit_distance(std::string_view a, std::string_view b);

/// The shortest text without an exponent that reads back as exactly `x`
/// ("20", "7.5"), else the full-precision form; for config and spec output.
std::string show_number(double x);

}  // namespace astraeus
