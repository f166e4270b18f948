"""A worker for torchrun_compat_test.sh: writes the environment torchrun's new options touch, as
JSON, to $OUT_DIR/env.$RANK, and some lines for --duplicate_std*_filters."""
import json
import os
import sys

names = ["LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_SIGNALS_TO_HANDLE",
         "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"]
seen = {name: os.environ.get(name) for name in names}
path = os.path.join(os.environ["OUT_DIR"], "env." + os.environ["RANK"])
with open(path + ".tmp", "w") as f:
    json.dump(seen, f, sort_keys=True)
os.rename(path + ".tmp", path)
print("an apple", flush=True)
print("banana", flush=True)
print("orange, pear", flush=True)
print("err apple", file=sys.stderr, flush=True)
print("err banana", file=sys.stderr, flush=True)
