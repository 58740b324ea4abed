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

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo -n)
else
  echo "ensure-wrk: ${missing[*]} missing and not root (no sudo): install them with apt-get" >&2
  exit 1
fi

install() {
  DEBIAN_FRONTEND=noninteractive ${SUDO[@]+"${SUDO[@]}"} apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
}

echo "ensure-wrk: installing ${missing[*]}" >&2
# A fresh machine may have no package lists yet: update once and retry.
if ! install; then
  ${SUDO[@]+"${SUDO[@]}"} apt-get -o DPkg::Lock::Timeout=600 update
  install
fi
command -v wrk >/dev/null 2>&1 || { echo "ensure-wrk: wrk still missing after install" >&2; exit 1; }
