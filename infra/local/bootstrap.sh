#!/usr/bin/env bash
# Install, as root on Debian, the system packages sealtrace's build and tests need, if missing.
# Idempotent and quiet when nothing is missing. Podman has its own script (podman-setup.sh).
set -euo pipefail

log() { printf 'bootstrap: %s\n' "$*"; }

missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
command -v git >/dev/null || missing+=(git)
# The native code's format is checked (clang-format-check.sh, Debian's 14).
command -v clang-format >/dev/null || missing+=(clang-format)
# The server's tests start a private PostgreSQL cluster and Redis server of their own.
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
# The console's tests drive a real Chromium through Selenium (no browser can be downloaded).
have_pkg chromium || missing+=(chromium)
have_pkg chromium-driver || missing+=(chromium-driver)

# CPython 3.11 with venv and headers (the engine is built against them). A python3.11
# already on PATH (pyenv, say) is used as it is when it has both.
if py="$(command -v python3.11)"; then
  "$py" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3.11-venv)
  "$py" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || missing+=(python3.11-dev)
else
  missing+=(python3.11 python3.11-venv python3.11-dev)
fi

if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "bootstrap: run as root, or install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for pkg in "${missing[@]}"; do have_pkg "$pkg" || { echo "bootstrap: $pkg did not install" >&2; exit 1; }; done
