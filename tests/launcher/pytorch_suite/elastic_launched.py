#!/usr/bin/env python3
"""Stands for PyTorch's test/distributed/launcher/bin/test_script_is_torchelastic_launched.py
(written for ddprun, not copied): writes str(torch.distributed.is_torchelastic_launched()),
"True" or "False", to the file of --out-file (either spelling); test_run.py reads its first line."""
import sys

import torch.distributed as dist

out = [a.split("=", 1)[1] for a in sys.argv[1:] if a.split("=", 1)[0] in ("--out-file", "--out_file")]
if len(out) != 1:
    sys.exit(f"elastic_launched.py: expected one --out-file=FILE, got {sys.argv[1:]}")
with open(out[0], "w") as f:
    f.write(str(dist.is_torchelastic_launched()))
