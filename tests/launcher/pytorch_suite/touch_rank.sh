#!/bin/sh
# Stands for PyTorch's test/distributed/launcher/bin/test_script.sh (written for ddprun, not
# copied): prints "creating DIR/RANK" on stdout and creates that empty file, DIR being its first
# argument (test_run.py's --no-python cases and test_capture_logs_using_default_logs_specs).
echo "creating $1/$RANK"
: >"$1/$RANK"
