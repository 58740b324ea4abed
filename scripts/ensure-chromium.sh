#!/usr/bin/env bash
# Makes Debian's Chromium available for the console's browser tests (test/console/), which drive it
# with playwright-core at /usr/bin/chromium: no browser is ever downloaded. Does nothing when
# /usr/bin/chromium is there. Otherwise installs the `chromium` package with apt-get (as root, or
# through sudo when it works without a password).
# Exit status 1, with what to do, when it cannot install.
set -euo pipefail

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
BIN=/usr/bin/chromium

if [ -x "$BIN" ]; then
  exit 0
fi

echo "ensure-chromium: $BIN not found; installing Debian's chromium package" >&2
status=0
# fonts-liberation: text in the screenshots (docs/console/) renders the same on every machine.
apt_install ensure-chromium chromium fonts-liberation || status=$?
if [ "$status" -eq 3 ]; then
  echo "  Install it yourself: sudo apt-get install -y chromium" >&2
  echo "  The console's browser tests need Chromium at $BIN." >&2
  exit 1
fi
if [ "$status" -ne 0 ] || [ ! -x "$BIN" ]; then
  echo "ensure-chromium: apt-get install chromium failed (status $status)." >&2
  exit 1
fi
"$BIN" --version >&2 || true
