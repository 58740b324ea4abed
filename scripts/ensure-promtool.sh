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

have() { command -v "$1" >/dev/null 2>&1; }

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
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  explain "cannot install (not root, no password-less sudo)."
fi
have apt-get || explain "no apt-get here."

export DEBIAN_FRONTEND=noninteractive
# Another install may hold the dpkg lock: wait for it rather than fail.
LOCK=(-o DPkg::Lock::Timeout=600)
"${SUDO[@]}" apt-get "${LOCK[@]}" update -qq || true
# policy-rc.d 101: the package must not start (or fail to start) a system service in containers.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod +x "$POLICY"
  CREATED_POLICY=1
fi
status=0
"${SUDO[@]}" apt-get "${LOCK[@]}" install -y -qq --no-install-recommends prometheus >/dev/null || status=$?
if [ "$CREATED_POLICY" -eq 1 ]; then "${SUDO[@]}" rm -f "$POLICY"; fi
if [ "$status" -ne 0 ] || ! have promtool; then
  explain "apt-get install prometheus failed (status $status)."
fi
promtool --version 2>&1 | head -1 >&2
