#!/usr/bin/env bash
# Makes promtool (Debian's `prometheus` package) available, so the metrics tests can run
# `promtool check metrics` on the gateway's whole /metrics output. Does nothing when promtool is
# already on PATH. Otherwise installs the package with apt-get (as root, or through sudo when it
# works without a password); the package's own Prometheus service is never started or needed.
# Without a way to install it, says what to install: with --required (CI) that is an error (exit 1);
# otherwise (`npm test`) it exits 0 and the metrics test leaves out only its promtool step, saying so.
set -euo pipefail

REQUIRED=0
[ "${1:-}" = "--required" ] && REQUIRED=1

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"

if have promtool; then
  exit 0
fi

explain() {
  echo "ensure-promtool: $1" >&2
  echo "  Install it yourself: sudo apt-get install -y --no-install-recommends prometheus   (or: brew install prometheus)" >&2
  echo "  Without promtool the metrics test leaves out its \`promtool check metrics\` step." >&2
  exit "$REQUIRED"
}

echo "ensure-promtool: promtool not found; installing Debian's prometheus package" >&2
status=0
apt_install ensure-promtool prometheus || status=$?
[ "$status" -eq 3 ] && explain "cannot install here (above)."
if [ "$status" -ne 0 ] || ! have promtool; then
  explain "apt-get install prometheus failed (status $status)."
fi
promtool --version 2>&1 | head -1 >&2
