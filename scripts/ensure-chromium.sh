#!/usr/bin/env bash
# Makes Debian's Chromium available for the console's browser tests (test/console/), which drive it
# with playwright-core at /usr/bin/chromium: no browser is ever downloaded. Does nothing when
# /usr/bin/chromium is there. Otherwise installs the `chromium` package with apt-get (as root, or
# through sudo when it works without a password).
# Exit status 1, with what to do, when it cannot install.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }
BIN=/usr/bin/chromium

if [ -x "$BIN" ]; then
  exit 0
fi

echo "ensure-chromium: $BIN not found; installing Debian's chromium package" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "ensure-chromium: cannot install (not root, no password-less sudo)." >&2
  echo "  Install it yourself: sudo apt-get install -y chromium" >&2
  echo "  The console's browser tests need Chromium at $BIN." >&2
  exit 1
fi
if ! have apt-get; then
  echo "ensure-chromium: no apt-get here; install Chromium so that $BIN exists." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another install may hold the dpkg lock: wait for it rather than fail.
LOCK=(-o DPkg::Lock::Timeout=600)
"${SUDO[@]}" apt-get "${LOCK[@]}" update -qq
status=0
# fonts-liberation: text in the screenshots (docs/console/) renders the same on every machine.
"${SUDO[@]}" apt-get "${LOCK[@]}" install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null || status=$?
if [ "$status" -ne 0 ] || [ ! -x "$BIN" ]; then
  echo "ensure-chromium: apt-get install chromium failed (status $status)." >&2
  exit 1
fi
"$BIN" --version >&2 || true
