#!/usr/bin/env bash
# Builds libFuzzer targets (test/fuzz/NAME_fuzz.cpp, with ASan and UBSan)
# with clang and runs each for N seconds on its seed corpus in
# test/fuzz/corpus/NAME. Exits non-zero when one finds a crash, a leak, a
# sanitizer report or a broken invariant; the input that did it is kept in
# <build>/fuzz-artifacts/NAME/.
#
# Usage: test/fuzz/run_fuzz.sh [seconds] [NAME...]   (default 20 kmsg)
#   NAME: kmsg (kernel-log parsers), frame (the gate's frame decoder),
#         handshake (the secure channel's handshake), api_json (the HTTP
#         API's JSON bodies)
# Environment:
#   CXX                      a clang++ (default: clang++-14, else clang++)
#   ASTRAEUS_FUZZ_BUILD_DIR  build folder (default: <repo>/build-fuzz)
#   ASTRAEUS_FUZZ_JOBS       ninja -j (default: 2)
set -euo pipefail

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [seconds] [NAME...]" >&2
  exit 2
fi
shift || true
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=(kmsg)
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${ASTRAEUS_FUZZ_BUILD_DIR:-$repo/build-fuzz}"
jobs="${ASTRAEUS_FUZZ_JOBS:-2}"

cxx="${CXX:-}"
if [[ -z "$cxx" ]]; then
  for candidate in clang++-14 clang++; do
    if command -v "$candidate" > /dev/null; then
      cxx="$candidate"
      break
    fi
  done
fi
if [[ -z "$cxx" ]] || ! grep -qi clang <<< "$("$cxx" --version 2> /dev/null)"; then
  echo "$0: needs clang++ (with libclang-rt for libFuzzer); set CXX" >&2
  exit 2
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CXX="$cxx" cmake -S "$repo" -B "$build" -G Ninja -DASTRAEUS_BUILD_BENCH=OFF
fi
# Read the whole list first: with pipefail, 'ninja | grep -q' fails whenever
# grep exits on its first match before ninja has finished writing (SIGPIPE).
targets="$(ninja -C "$build" -t targets all)"
wanted=()
for name in "${names[@]}"; do
  if ! grep -q "^${name}_fuzz:" <<< "$targets"; then
    echo "$0: $build has no ${name}_fuzz target: configured with a compiler other than clang," \
         "or libFuzzer is not usable (see the cmake output)" >&2
    exit 2
  fi
  wanted+=("${name}_fuzz")
done
ninja -C "$build" -j "$jobs" "${wanted[@]}"

# New inputs go to a scratch folder, not into the seed corpus in the tree.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  artifacts="$build/fuzz-artifacts/$name"
  mkdir -p "$artifacts" "$work/$name"
  "$build/test/fuzz/${name}_fuzz" \
    -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$work/$name" "$repo/test/fuzz/corpus/$name"
done
