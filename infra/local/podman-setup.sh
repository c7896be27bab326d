#!/usr/bin/env bash
# Set up rootless Podman for sealtrace on a Debian 12 host (run as root).
#
# Idempotent: safe to run any number of times; when everything is already in
# place it only verifies `podman info` and prints a single line.
#
# Environment (all optional):
#   SEALTRACE_PODMAN_USER            unprivileged user       (default: sealtrace-sbx)
#   SEALTRACE_PODMAN_RUNTIME         OCI runtime             (default: runc)
#   SEALTRACE_PODMAN_CGROUP_MANAGER  cgroup manager          (default: cgroupfs)
#   SEALTRACE_PODMAN_NOFILE          default nofile ulimit   (default: 1024:1024)
#   SEALTRACE_PODMAN_NPROC           default nproc ulimit    (default: 1024:1024)
#
# Why runc/cgroupfs/explicit ulimits: crun fails on this host's hybrid cgroup
# layout, there is no systemd/logind, and the hard nofile limit (20000) is
# below Podman's built-in default (1048576), so containers would fail to start.
# No registry is reachable: nothing here (or in the resulting config) pulls.
#
# Run podman as the user afterwards with:  infra/local/podman-as-user <args>
set -euo pipefail

PODMAN_USER="${SEALTRACE_PODMAN_USER:-sealtrace-sbx}"
RUNTIME="${SEALTRACE_PODMAN_RUNTIME:-runc}"
CGROUP_MANAGER="${SEALTRACE_PODMAN_CGROUP_MANAGER:-cgroupfs}"
NOFILE="${SEALTRACE_PODMAN_NOFILE:-1024:1024}"
NPROC="${SEALTRACE_PODMAN_NPROC:-1024:1024}"
SUBID_MIN=200000
SUBID_COUNT=65536

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'podman-setup: %s\n' "$*"; }
die() { printf 'podman-setup: ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" -eq 0 ]] || die "must run as root"

# --- 1. packages -------------------------------------------------------------
PACKAGES=(podman runc uidmap slirp4netns fuse-overlayfs busybox-static)
# Podman's own runtime preference: the configured runtime must be installed.
case "$RUNTIME" in
  runc | crun) PACKAGES+=("$RUNTIME") ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  # Deduplicate (RUNTIME may already be in the list).
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v podman >/dev/null || die "podman not found after install"

# --- 2. unprivileged user + subordinate id ranges ----------------------------
if ! getent passwd "$PODMAN_USER" >/dev/null; then
  log "creating system user $PODMAN_USER"
  useradd --system --create-home --home-dir "/home/$PODMAN_USER" \
    --shell /usr/sbin/nologin --user-group "$PODMAN_USER"
fi
IFS=: read -r _ _ PODMAN_UID PODMAN_GID _ PODMAN_HOME _ < <(getent passwd "$PODMAN_USER")
[[ -d "$PODMAN_HOME" ]] || install -d -o "$PODMAN_UID" -g "$PODMAN_GID" -m 0750 "$PODMAN_HOME"

subids_changed=0
ensure_subid() { # $1 = /etc/subuid or /etc/subgid
  local file="$1" start
  touch "$file"
  if grep -Eq "^(${PODMAN_USER}|${PODMAN_UID}):" "$file"; then
    return 0
  fi
  # First free start >= SUBID_MIN that is past every existing range in the file.
  start="$(awk -F: -v min="$SUBID_MIN" '
    NF >= 3 && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { end = $2 + $3; if (end > min) min = end }
    END { print min }' "$file")"
  printf '%s:%s:%s\n' "$PODMAN_USER" "$start" "$SUBID_COUNT" >>"$file"
  log "added $file range $PODMAN_USER:$start:$SUBID_COUNT"
  subids_changed=1
}
ensure_subid /etc/subuid
ensure_subid /etc/subgid

# --- 3. XDG_RUNTIME_DIR (no systemd/logind here, so nobody else creates it) --
RUNTIME_DIR="/run/user/$PODMAN_UID"
if [[ ! -d /run/user ]]; then
  install -d -o root -g root -m 0755 /run/user
fi
if [[ "$(stat -c '%u:%g:%a' "$RUNTIME_DIR" 2>/dev/null || true)" != "$PODMAN_UID:$PODMAN_GID:700" ]]; then
  install -d -o "$PODMAN_UID" -g "$PODMAN_GID" -m 0700 "$RUNTIME_DIR"
  chown "$PODMAN_UID:$PODMAN_GID" "$RUNTIME_DIR"
  chmod 0700 "$RUNTIME_DIR"
fi

# /dev/net/tun: udev normally makes it 0666, but there is no udev here and it
# is 0600, so slirp4netns (rootless networking) fails with EACCES.
if [[ -c /dev/net/tun ]]; then
  if [[ "$(stat -c '%a' /dev/net/tun)" != 666 ]]; then
    chmod 0666 /dev/net/tun
    log "made /dev/net/tun world-accessible (0666, Debian's udev default)"
  fi
else
  log "warning: /dev/net/tun missing; only --network=none will work"
fi

# --- 4. per-user container configuration -------------------------------------
config_changed=0
write_if_changed() { # $1 = path, content on stdin; file owned by the user, 0644
  local path="$1" tmp
  tmp="$(mktemp)"
  cat >"$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
  else
    install -o "$PODMAN_UID" -g "$PODMAN_GID" -m 0644 "$tmp" "$path"
    rm -f "$tmp"
    log "wrote $path"
    config_changed=1
  fi
}
for d in "$PODMAN_HOME/.config" "$PODMAN_HOME/.config/containers" \
  "$PODMAN_HOME/.local" "$PODMAN_HOME/.local/share"; do
  [[ -d "$d" ]] || install -d -o "$PODMAN_UID" -g "$PODMAN_GID" -m 0755 "$d"
done

write_if_changed "$PODMAN_HOME/.config/containers/containers.conf" <<EOF
# Managed by sealtrace infra/local/podman-setup.sh -- local edits are overwritten.
[containers]
default_ulimits = [
  "nofile=${NOFILE}",
  "nproc=${NPROC}",
]
log_driver = "k8s-file"

[engine]
runtime = "${RUNTIME}"
cgroup_manager = "${CGROUP_MANAGER}"
events_logger = "file"
# No registry is reachable from these machines: never try to pull.
pull_policy = "never"
EOF

# Native overlayfs in a user namespace (kernel >= 5.13); no FUSE helper needed.
write_if_changed "$PODMAN_HOME/.config/containers/storage.conf" <<EOF
# Managed by sealtrace infra/local/podman-setup.sh -- local edits are overwritten.
[storage]
driver = "overlay"
runroot = "${RUNTIME_DIR}/containers"
graphroot = "${PODMAN_HOME}/.local/share/containers/storage"
EOF

# --- 5. verify ---------------------------------------------------------------
as_user() { "$SCRIPT_DIR/podman-as-user" "$@"; }

if ((subids_changed)); then
  # Existing rootless storage/pause process must pick up the new id ranges.
  as_user system migrate >/dev/null 2>&1 || true
fi

info_err="$(mktemp)"
trap 'rm -f "$info_err"' EXIT
if ! info="$(as_user info --format \
  '{{.Host.Security.Rootless}} {{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}' \
  2>"$info_err")"; then
  cat "$info_err" >&2
  die "'podman info' as $PODMAN_USER failed"
fi
read -r rootless oci cgm driver <<<"$info"
[[ "$rootless" == "true" ]] || die "podman as $PODMAN_USER is not rootless (got '$rootless')"
[[ "$oci" == "$RUNTIME" ]] || die "podman OCI runtime is '$oci', expected '$RUNTIME'"
[[ "$cgm" == "$CGROUP_MANAGER" ]] || die "podman cgroup manager is '$cgm', expected '$CGROUP_MANAGER'"

if ((config_changed || subids_changed || ${#missing[@]})); then
  log "ok: user=$PODMAN_USER uid=$PODMAN_UID rootless=$rootless runtime=$oci cgroup_manager=$cgm storage=$driver"
  log "run podman as the user with: $SCRIPT_DIR/podman-as-user <args>"
else
  log "ok (already set up): user=$PODMAN_USER runtime=$oci cgroup_manager=$cgm storage=$driver"
fi
