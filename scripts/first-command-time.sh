#!/usr/bin/env bash
# How long README.md's first command takes on a fresh Debian 12 machine (issue 60): makes a
# fresh bookworm root with debootstrap (minbase: no compiler, no ccache, nothing of ddprun's),
# puts the committed tree of REV (default HEAD) in it, and runs inside it, with chroot, the steps
# of scripts/run-main.sh one by one, each timed: install-deps.sh --main, build.sh --main, then
# run-main.sh itself (its install and build find nothing to do; then the example job). Prints the
# load average every 30 s and at the end, since a figure taken on a loaded machine is not the
# figure of an idle one. As root; needs debootstrap and Debian's mirror.
#   scripts/first-command-time.sh [--root DIR] [--keep] [REV]
# The root (default: a new folder under /var/tmp) is removed at the end unless --keep.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root="" keep=0 rev=HEAD
while [[ $# -gt 0 ]]; do
  case $1 in
    --root) root=${2:?--root needs a folder}; shift 2 ;;
    --keep) keep=1; shift ;;
    -*) echo "first-command-time: unknown option $1 (expected --root DIR, --keep, REV)" >&2; exit 64 ;;
    *) rev=$1; shift ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "first-command-time: needs root (debootstrap, chroot, mounts)" >&2; exit 64; }
command -v debootstrap >/dev/null || { echo "first-command-time: needs debootstrap (apt-get install debootstrap)" >&2; exit 69; }
commit=$(git -C "$here/.." rev-parse --verify --short "$rev^{commit}" 2>/dev/null) \
  || { echo "first-command-time: $rev is not a commit of this clone" >&2; exit 64; }
[[ -n $root ]] || root=$(mktemp -d /var/tmp/ddprun-first-command.XXXXXX)
[[ ! -e $root/etc ]] || { echo "first-command-time: $root already holds a root; give an empty folder" >&2; exit 64; }

sampler=""
cleanup() {
  [[ -z $sampler ]] || kill "$sampler" 2>/dev/null || true
  for m in dev sys proc; do umount -R "$root/$m" 2>/dev/null || true; done
  if (( keep )); then echo "first-command-time: the root is kept in $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

echo "== debootstrap bookworm into $root (not timed: the fresh machine)"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.debootstrap.log" 2>&1 \
  || { tail -5 "$root.debootstrap.log" >&2; echo "first-command-time: debootstrap failed (log above)" >&2; exit 69; }
rm -f "$root.debootstrap.log"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mkdir -p "$root/src"
git -C "$here/.." archive "$commit" | tar -x -C "$root/src"

echo "== $commit; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
start=$SECONDS
( while sleep 30; do echo "   $((SECONDS - start)) s: load $(cut -d' ' -f1-3 /proc/loadavg)"; done ) &
sampler=$!
# step WHAT COMMAND: runs COMMAND in the root, in /src, with a clean environment; says how long.
step() {
  local what=$1 t=$SECONDS rc=0
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root TERM=dumb bash -c "cd /src && $2" || rc=$?
  echo "== $what: $((SECONDS - t)) s (exit $rc)"
  return $rc
}
step "install (install-deps.sh --main)" "bash scripts/install-deps.sh --main"
step "build (build.sh --main)" "bash scripts/build.sh --main"
step "run-main.sh (the job; install and build find nothing to do)" "bash scripts/run-main.sh"
echo "== the first command from a fresh root: $((SECONDS - start)) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
