#!/usr/bin/env bash
# DistributedSampler's index lists equal torch.utils.data.DistributedSampler's, from the PyTorch
# that matches the libtorch built against (TORCH_PYTHON).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null || skip "$TORCH_PYTHON has no torch"

# N W SEED EPOCH DROP_LAST SHUFFLE
cat > "$T/cases" <<'CASES'
10 2 0 0 0 1
11 2 5 0 0 1
11 2 5 1 0 1
11 3 5 2 1 1
17 4 42 3 0 1
17 4 42 3 1 1
100 7 0 5 0 1
100 7 0 5 1 1
5 8 1 0 0 1
5 8 1 0 1 1
1000 3 123 9 0 1
13 4 0 0 0 0
13 4 0 0 1 0
CASES
"$RANK_DRIVER" sampler < "$T/cases" > "$T/cpp"
"$TORCH_PYTHON" - "$T/cases" > "$T/py" <<'PY'
import sys
from torch.utils.data import DistributedSampler
for line in open(sys.argv[1]):
    n, w, seed, epoch, drop_last, shuffle = map(int, line.split())
    for r in range(w):
        s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=bool(shuffle), seed=seed,
                               drop_last=bool(drop_last))
        s.set_epoch(epoch)
        print(n, w, seed, epoch, drop_last, shuffle, f"r{r}:", *list(s), sep=" ")
PY
diff -u "$T/py" "$T/cpp" || fail "index lists differ from PyTorch's"
ok "$(wc -l < "$T/cpp") index lists equal PyTorch's DistributedSampler"
