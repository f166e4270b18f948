# Sourced by the tests that need a real munged (root; they skip without munge installed):
# start_munged starts one with a key of its own, its socket at $M/munge.socket, reachable by every
# uid, and stops it (removing $M) when the test exits.
[[ $(id -u) -eq 0 ]] || skip "needs root (munged runs as the munge user)"
command -v munged > /dev/null && command -v mungekey > /dev/null && id munge > /dev/null 2>&1 \
  || skip "munge is not installed (scripts/install-deps.sh --slurm installs it)"

# munged writes its seed file and removes its socket as it exits: the folder goes once it is gone.
stop_munged() {
  local pid
  pid=$(cat "$M/munged.pid" 2> /dev/null) || pid=
  if [[ -n $pid ]] && kill "$pid" 2> /dev/null; then
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2> /dev/null && (( SECONDS < deadline )); do sleep 0.05; done
  fi
  rm -rf "$M"
}

start_munged() {
  # munged's files in a folder munge owns, reachable by every uid.
  M=$(mktemp -d /tmp/ddprun-munge.XXXXXX)
  chmod 755 "$M"
  chown munge:munge "$M"
  trap 'rc=$?; stop_munged || true; cleanup $rc' EXIT
  runuser -u munge -- mungekey --create --keyfile="$M/munge.key"
  runuser -u munge -- munged --socket="$M/munge.socket" --key-file="$M/munge.key" --pid-file="$M/munged.pid" \
    --log-file="$M/munged.log" --seed-file="$M/munged.seed"
  wait_for 20 test -S "$M/munge.socket"
}
