#!/usr/bin/env bash
# Makes redis-server and redis-cli (7.x, Debian's package) available for the Redis tests.
# Does nothing when both are already on PATH. Otherwise installs the `redis-server` package with
# apt-get (as root, or through sudo when it works without a password). The package's own service
# is never needed: the tests start their own servers on free ports in temp folders.
# Exit status 1, with what to do, when it cannot install.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have redis-server && have redis-cli; then
  exit 0
fi

echo "ensure-redis: redis-server not found; installing Debian's redis-server package" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "ensure-redis: cannot install (not root, no password-less sudo)." >&2
  echo "  Install it yourself: sudo apt-get install -y redis-server   (or: brew install redis)" >&2
  echo "  The Redis tests need redis-server and redis-cli 7.x on PATH." >&2
  exit 1
fi
if ! have apt-get; then
  echo "ensure-redis: no apt-get here; install redis-server 7.x with your package manager." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another install may hold the dpkg lock: wait for it rather than fail.
LOCK=(-o DPkg::Lock::Timeout=600)
"${SUDO[@]}" apt-get "${LOCK[@]}" update -qq
# policy-rc.d 101: the package must not start (or fail to start) a system service in containers.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod +x "$POLICY"
  CREATED_POLICY=1
fi
status=0
"${SUDO[@]}" apt-get "${LOCK[@]}" install -y -qq --no-install-recommends redis-server >/dev/null || status=$?
if [ "$CREATED_POLICY" -eq 1 ]; then "${SUDO[@]}" rm -f "$POLICY"; fi
if [ "$status" -ne 0 ] || ! have redis-server || ! have redis-cli; then
  echo "ensure-redis: apt-get install redis-server failed (status $status)." >&2
  exit 1
fi
redis-server --version >&2
