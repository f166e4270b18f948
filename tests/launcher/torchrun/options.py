"""Every option of torchrun's --help (its own argument parser, which prints the help), with a
value it accepts, one command line a line: `--option=value`, `-o value` or `--flag`, for every
spelling."""
from torch.distributed.run import get_args_parser

# Options whose default is None: a value torchrun accepts.
SAMPLES = {"rdzv_endpoint": "localhost:29400", "local_addr": "127.0.0.1", "log_dir": "logs",
           "numa_binding": "node", "logs_specs": "default", "local_ranks_filter": "0",
           "rdzv_id": "job", "nproc_per_node": "1"}
for action in get_args_parser()._actions:
    if not action.option_strings or action.dest == "help":
        continue
    for option in action.option_strings:
        if action.nargs == 0:
            print(option)
            continue
        value = SAMPLES.get(action.dest, action.default)
        if isinstance(value, list):
            value = ",".join(value) or "x"
        # -r=0 is argparse's own leniency; the usual short form is -r 0.
        print(f"{option}={value}" if option.startswith("--") else f"{option} {value}")
