#!/usr/bin/env bash
# Makes PostgreSQL's server programs (initdb, pg_ctl, postgres: Debian's `postgresql` package)
# available for the ledger's PostgreSQL tests. Does nothing when they are on PATH or in Debian's
# /usr/lib/postgresql/<version>/bin (where the package puts them; test/helpers/postgres.ts looks
# there too). Otherwise installs the `postgresql` package with apt-get (as root, or through sudo
# when it works without a password). The package's own service and cluster are never used: the
# tests run their own clusters (initdb in a temp folder, a free port).
# Exit status 1, with what to do, when it cannot install.
set -euo pipefail

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"

found() {
  if have initdb && have pg_ctl && have postgres; then
    return 0
  fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      return 0
    fi
  done
  return 1
}

if found; then
  exit 0
fi

echo "ensure-postgres: initdb/pg_ctl/postgres not found; installing Debian's postgresql package" >&2
status=0
apt_install ensure-postgres postgresql || status=$?
if [ "$status" -eq 3 ]; then
  echo "  Install it yourself: sudo apt-get install -y postgresql   (or: brew install postgresql)" >&2
  echo "  The ledger's PostgreSQL tests need initdb, pg_ctl and postgres (on PATH or in /usr/lib/postgresql/<version>/bin)." >&2
  exit 1
fi
if [ "$status" -ne 0 ] || ! found; then
  echo "ensure-postgres: apt-get install postgresql failed (status $status)." >&2
  exit 1
fi
for d in /usr/lib/postgresql/*/bin; do
  if [ -x "$d/postgres" ]; then
    "$d/postgres" --version >&2
    break
  fi
done
