#!/usr/bin/env bash
# Per-step time of the fixed MLP (4 Linear layers of 1024, batch 64 per rank, one thread per
# process, gloo): world size 1, world size 2 with DDP, world size 2 without gradient sync, for
# ddprun's C++ DDP and PyTorch's Python DDP (Debian's python3-torch) in the same run.
#   scripts/bench-ddp.sh [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDPRUN_BUILD_DIR:-$root/build}
steps=${1:-100}
ddprun=$build/launcher/ddprun
export OMP_NUM_THREADS=1 PYTHON_EXEC=/usr/bin/python3
blas=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo unknown)

median() { sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p'; }
run() {  # run LANG MODE: prints the median step time in ms
  local lang=$1 mode=$2 program
  if [[ $lang == cpp ]]; then program=("$build/worker/bench_ddp"); else program=("$root/scripts/bench_ddp.py"); fi
  if [[ $mode == single ]]; then
    env -u WORLD_SIZE -u RANK "${program[@]}" --mode single --steps "$steps" | median
  else
    "$ddprun" --nproc_per_node=2 "${program[@]}" --mode "$mode" --steps "$steps" 2>/dev/null \
      | sed 's/^\[rank0\]: //' | median
  fi
}
declare -A t
for lang in cpp py; do
  for mode in single ddp nosync; do t[$lang.$mode]=$(run $lang $mode); done
done
echo "BLAS: $blas; $(getconf _NPROCESSORS_ONLN) cores; median of $steps steps"
printf '%-28s %10s %10s %8s\n' "per-step time (ms)" "C++ ddprun" "Python" "C++/Py"
for mode in single ddp nosync; do
  label=$mode
  case $mode in single) label="world size 1";; ddp) label="world size 2, DDP";; nosync) label="world size 2, no sync";; esac
  printf '%-28s %10.2f %10.2f %8.2f\n' "$label" "${t[cpp.$mode]}" "${t[py.$mode]}" \
    "$(awk -v a="${t[cpp.$mode]}" -v b="${t[py.$mode]}" 'BEGIN { print a / b }')"
done
printf '%-28s %10.2f %10.2f\n' "DDP overhead over no sync" \
  "$(awk -v a="${t[cpp.ddp]}" -v b="${t[cpp.nosync]}" 'BEGIN { print a - b }')" \
  "$(awk -v a="${t[py.ddp]}" -v b="${t[py.nosync]}" 'BEGIN { print a - b }')"
