#!/usr/bin/env bash
# The kernel-log parsers' fuzz target for N seconds (default 20); see
# run_fuzz.sh, which does the work for every target.
exec "$(dirname "${BASH_SOURCE[0]}")/run_fuzz.sh" "${1:-20}" kmsg
