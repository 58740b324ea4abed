#!/usr/bin/env bash
# Makes sure `wrk` (the benchmark's load generator, Debian package `wrk`) and `taskset` (util-linux,
# to pin the processes to cores) are installed. `npm run bench` calls this first; it installs only
# what is missing, so it is a no-op on a prepared machine. `--valgrind` also makes sure of valgrind
# (for `npm run bench:instructions`).
set -euo pipefail

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
if [ "${1:-}" = "--valgrind" ]; then
  { command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1; } || missing+=(valgrind)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
echo "ensure-wrk: installing ${missing[*]}" >&2
status=0
apt_install ensure-wrk "${missing[@]}" || status=$?
if [ "$status" -ne 0 ] || ! have wrk || ! have taskset; then
  echo "ensure-wrk: could not install ${missing[*]} (status $status): install them with apt-get" >&2
  exit 1
fi
