# Sourced by the ensure-*.sh scripts: installing Debian packages the one way they all need.
# (bash; the caller has `set -euo pipefail`.)

have() { command -v "$1" >/dev/null 2>&1; }

# apt_install NAME PACKAGE...
# Installs PACKAGEs with apt-get, as root or through sudo when it works without a password. Waits
# out another install's dpkg lock rather than failing; refreshes the package lists first (a fresh
# machine may have none; a failed refresh still lets the install try the lists there are). While it
# runs, a policy-rc.d that answers 101 keeps the packages from starting (or failing to start) a
# system service: the tests start their own servers, and containers have no init to ask.
# Returns 0 when apt-get installed them; 3 when this machine cannot install (said on stderr,
# prefixed with NAME); otherwise apt-get's status.
apt_install() {
  local name="$1"
  shift
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "$name: cannot install (not root, no password-less sudo)." >&2
      return 3
    fi
  fi
  if ! have apt-get; then
    echo "$name: no apt-get here." >&2
    return 3
  fi
  local apt=(${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
  "${apt[@]}" update -qq || true
  local policy=/usr/sbin/policy-rc.d created=0 status=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | ${sudo[@]+"${sudo[@]}"} tee "$policy" >/dev/null
    ${sudo[@]+"${sudo[@]}"} chmod +x "$policy"
    created=1
  fi
  "${apt[@]}" install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  if [ "$created" -eq 1 ]; then ${sudo[@]+"${sudo[@]}"} rm -f "$policy"; fi
  return "$status"
}
