#!/usr/bin/env python3
"""Stands for PyTorch's test/distributed/launcher/bin/test_script.py (written for ddprun, not
copied). Its contract, on which test_run.py's cases assert: every variable below is in the
environment (a missing one fails the worker), TEST_SENTINEL_PARENT included (the test's own
environment reaches the workers); with --fail the worker raises a RuntimeError (exit 1); otherwise
it creates an empty file named after its RANK in --touch-file-dir (either spelling)."""
import os
import sys

NEEDED = ("LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE ROLE_WORLD_SIZE "
          "MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS "
          "TORCHELASTIC_RUN_ID OMP_NUM_THREADS TEST_SENTINEL_PARENT TORCHELASTIC_ERROR_FILE").split()

fail, folder = False, None
for arg in sys.argv[1:]:
    if arg == "--fail":
        fail = True
    elif arg.split("=", 1)[0] in ("--touch-file-dir", "--touch_file_dir") and "=" in arg:
        folder = arg.split("=", 1)[1]
    else:
        sys.exit(f"touch_rank.py: unexpected argument {arg!r}")
missing = [name for name in NEEDED if name not in os.environ]
if missing:
    sys.exit(f"touch_rank.py: not in the environment: {' '.join(missing)}")
for name in NEEDED:
    print(f"{name} = {os.environ[name]}")
if fail:
    raise RuntimeError("raising exception since --fail flag was set")
if folder is None:
    sys.exit("touch_rank.py: --touch-file-dir is needed without --fail")
open(os.path.join(folder, os.environ["RANK"]), "a").close()
print(f"Success, created {os.path.join(folder, os.environ['RANK'])}")
