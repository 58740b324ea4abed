#!/usr/bin/env bash
# Makes redis-server and redis-cli (7.x, Debian's package) available for the Redis tests.
# Does nothing when both are already on PATH. Otherwise installs the `redis-server` package with
# apt-get (as root, or through sudo when it works without a password). The package's own service
# is never needed: the tests start their own servers on free ports in temp folders.
# Exit status 1, with what to do, when it cannot install.
set -euo pipefail

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"

if have redis-server && have redis-cli; then
  exit 0
fi

echo "ensure-redis: redis-server not found; installing Debian's redis-server package" >&2
status=0
apt_install ensure-redis redis-server || status=$?
if [ "$status" -eq 3 ]; then
  echo "  Install it yourself: sudo apt-get install -y redis-server   (or: brew install redis)" >&2
  echo "  The Redis tests need redis-server and redis-cli 7.x on PATH." >&2
  exit 1
fi
if [ "$status" -ne 0 ] || ! have redis-server || ! have redis-cli; then
  echo "ensure-redis: apt-get install redis-server failed (status $status)." >&2
  exit 1
fi
redis-server --version >&2
