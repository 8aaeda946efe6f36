#pragma once
/// Hash maps and sets keyed by a name (a run's key, a queue name, a
/// machine's name) on the scheduler's hot path.
///
/// Abseil's Swiss tables (Debian's libabsl-dev): a look-up probes a group of
/// one-byte tags and then compares one key, where `std::unordered_map` walks a
/// bucket's linked nodes (a cache miss per node, bench/RESULTS.md section 37:
/// ~17 % of the scheduler actor's samples were such walks). Debian's Abseil has
/// its own `absl::string_view` (ABSL_OPTION_USE_STD_STRING_VIEW is 0), so a
/// look-up takes a `std::string` (or an `absl::string_view`), not a
/// `std::string_view`.
///
/// Iteration order is unspecified, as with the standard maps: whoever lists
/// what these hold sorts it. `name_map` keeps each value where it was put
/// (node-based: references and pointers to values stay valid across inserts
/// and rehashes, as the standard map's do); `name_set` does not (no one holds a
/// reference to its strings).

#include <string>

#include <absl/container/flat_hash_set.h>
#include <absl/container/node_hash_map.h>

namespace astraeus {

/// A map from a name to `V`; values do not move once inserted.
template <class V>
using name_map = absl::node_hash_map<std::string, V>;

/// A set of names.
using name_set = absl::flat_hash_set<std::string>;

} // namespace astraeus
