"""ddprun's warm interpreter (zygote) for Python workers, --warm_start
(launcher/process/zygote.hpp says the protocol, launcher/process/README.md the design).

ddprun starts it as `python -u _ddprun_zygote.py FD MODULE,... PROGRAM PADDING` with the workers'
interpreter and environment, FD its end of a Unix stream socket, PROGRAM the .py PROGRAM ("" for
-m). It compiles PROGRAM, imports torch, torch.distributed, torch._dynamo (where torch has it)
and the --preload modules (at nice 19 with DDPRUN_ZYGOTE_BACKGROUND=1, where it can), says
"ready" (or "failed ..." and exits), and then forks one worker per
request. Each worker is made by a double fork, so that it is re-parented to ddprun (a child
subreaper), and then becomes what `python -u SCRIPT ARGS` (or `-m MODULE`) would have been:
environment, cwd, argv, sys.path[0], a new __main__, the signal dispositions Python starts with,
only descriptors 0, 1 and 2, Python's, NumPy's and torch's random state drawn from the OS, ddprun's
bootstrap armed for its own files. Standard library only until the imports it is told to make.
"""
import os
import signal
import socket
import struct
import sys
import time

# What a fresh interpreter has, before anything imported here could change it.
_START_SIGNALS = {s: signal.getsignal(s) for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)}
_HERE = os.path.dirname(os.path.abspath(__file__))
_MAX_FDS = 5  # stdin, stdout, stderr, the cgroup's cgroup.procs (optional)


def _load_worker_start():
    """The module of what every worker's start does (_ddprun_worker_start.py): the one the
    zygote's own sitecustomize loaded, or loaded here by its file (this folder need not be on
    sys.path: PYTHONSAFEPATH)."""
    name = "_ddprun_worker_start"
    if name not in sys.modules:
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_start = _load_worker_start()


def _send(sock, text):
    data = text.encode("utf-8", "replace")
    sock.sendall(struct.pack("<I", len(data)) + data)


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_request(sock):
    """One request: its NUL-separated fields and the descriptors sent with its first bytes."""
    head, fds, _, _ = socket.recv_fds(sock, 4, _MAX_FDS)
    if not head:
        raise EOFError
    head += _recv_exact(sock, 4 - len(head))
    (size,) = struct.unpack("<I", head)
    return _recv_exact(sock, size).split(b"\0"), fds


def _parse(fields, fds):
    """The request as ddprun encodes it (zygote.cpp: encode_fork_request)."""
    it = iter(fields)
    request = {"kind": next(it).decode(), "cwd": next(it), "ddprun": int(next(it))}
    cpus = next(it)
    request["cpus"] = {int(c) for c in cpus.split(b",")} if cpus else None
    start_by = next(it)
    request["start_by"] = int(start_by) if start_by else None
    request["argv"] = [next(it) for _ in range(int(next(it)))]
    request["environ"] = [next(it) for _ in range(int(next(it)))]
    request["stdio"] = fds[:3]
    request["cgroup_procs"] = fds[3] if len(fds) > 3 else None
    return request


def _threads():
    return len(os.listdir("/proc/self/task"))


def _quiesce_blas():
    """OpenBLAS starts its thread pool when it is loaded (numpy and torch load it), sized from
    OMP_NUM_THREADS / OPENBLAS_NUM_THREADS or the CPUs. Its own blas_thread_shutdown_() joins
    those threads (its fork handler calls it too), and its next call starts them again, as many:
    the worker gets the pool a cold start would have."""
    import ctypes
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "blas" in line.rsplit("/", 1)[-1]}
    for path in sorted(libraries):
        shutdown = getattr(ctypes.CDLL(path), "blas_thread_shutdown_", None)
        if shutdown is not None:
            shutdown()


def _why_not_fork():
    """Why forking now would give a broken worker, or None."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised in the zygote"
    threads = _threads()
    if threads > 1:
        _quiesce_blas()
        threads = _threads()
    if threads > 1:
        return f"the zygote has {threads} threads"
    return None


def _reparented_worker(request, go):
    """In the grandchild, once its parent is gone: into the round's cgroup, its own process
    group, its CPUs, a death signal from ddprun, its descriptors, signals and environment."""
    if os.read(go, 1) != b"g":
        os._exit(1)  # the zygote died before it told ddprun about this process
    os.close(go)
    if request["cgroup_procs"] is not None:
        os.write(request["cgroup_procs"], b"0")
    os.setpgid(0, 0)
    if request["cpus"]:
        os.sched_setaffinity(0, request["cpus"])
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        os._exit(127)
    if os.getppid() != request["ddprun"]:
        os._exit(128 + signal.SIGKILL)  # ddprun died before the death signal was set
    for target, fd in enumerate(request["stdio"]):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    for s, handler in _START_SIGNALS.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    for entry in request["environ"]:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
    os.chdir(request["cwd"])
    try:
        _show_command_line(request)
        _show_environment(request)
    except OSError:
        pass  # /proc/self/mem not writable here: ps shows the zygote's command line
    # Last, in its own group (where the orphan guard's fence finds it): ddprun checked the
    # fence's deadline before it asked, but may have been stopped since (zygote.hpp, start_by).
    if request["start_by"] is not None and time.monotonic_ns() >= request["start_by"]:
        os.kill(os.getpid(), signal.SIGKILL)


def _show_environment(request):
    """The worker's environment in /proc/PID/environ as a cold start's, written over the
    zygote's environment block, which ddprun made larger than it by DDPRUN_ZYGOTE_ENV_ROOM's
    padding (whole entries only; NULs after the last, as for the command line)."""
    def whole_entries(size):
        block = b""
        for entry in request["environ"]:
            if len(block) + len(entry) + 1 > size:
                break
            block += entry + b"\0"
        return block
    _write_over(50, whole_entries)  # env_start, env_end


def _show_command_line(request):
    """The worker's command line in /proc/PID/cmdline (ps, pgrep -f, py-spy) as a cold start's:
    `PYTHON -u [-m] PROGRAM ARGS`, written over the zygote's own arguments, whose last one is
    padding for it (as setproctitle does; cut short if longer). The padding's NULs stay after the
    last argument: changing the arguments' end needs CAP_SYS_RESOURCE (PR_SET_MM)."""
    words = [os.fsencode(getattr(sys, "orig_argv", [sys.executable])[0]), b"-u"] + ([b"-m"] if request["kind"] == "module" else []) + request["argv"]
    _write_over(48, lambda size: b"\0".join(words)[: size - 1])  # arg_start, arg_end


def _write_over(field, data_for):
    """Writes data_for(size) over this process's memory between the addresses that
    /proc/self/stat gives as fields `field` and `field` + 1 (numbered from 1, as proc(5) does),
    and NULs after it to the end."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # from field 3, the state
    start, end = int(fields[field - 3]), int(fields[field - 2])
    data = data_for(end - start)
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(data + b"\0" * (end - start - len(data)))


def _bootstrap_worker():
    """What ddprun's sitecustomize does at a cold worker's start (the same module does it), for
    this worker's environment; then the random state a cold start draws."""
    torch = sys.modules.get("torch")
    _start.restore_pythonpath(_HERE)
    _start.nccl_async_error_handling(
        lambda: None if torch is None else tuple(int(p) for p in torch.__version__.split(".")[:2]))
    progress = sys.modules.get("_ddprun_progress")
    if progress is not None and os.environ.get("DDPRUN_HEARTBEAT_FILE"):
        progress.arm()
    _start.register_stacks()
    if torch is not None:
        torch.default_generator.seed()  # torch seeds its CPU generator from the OS at import: so does each worker
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # a cold worker's NumPy draws its seed from the OS; Python's random reseeds at fork
    _run_next_sitecustomize()


def _run_next_sitecustomize():
    """The sitecustomize that ddprun's shadows (Debian's, a virtual environment's, the user's)
    and the usercustomize, which ddprun's deferred from the warm interpreter's start to here
    (sitecustomize.py): they run with this worker's environment, and what they print is this
    rank's, as in a cold worker. Not when the interpreter ran its own (ddprun's was not first:
    -I, -E) or has none; an error in one is told as `site` tells it."""
    import importlib
    names = [] if "sitecustomize" in sys.modules else ["sitecustomize"]
    if getattr(_start, "deferred_usercustomize", False):
        names.append("usercustomize")
    for name in names:  # ddprun's folder is off sys.path: the next sitecustomize
        try:
            importlib.import_module(name)
        except Exception as error:
            if not (isinstance(error, ImportError) and error.name == name):  # none at all: nothing said
                sys.stderr.write(f"Error in {name}; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}\n")


def _fork_worker(sock, request):
    """Forks the worker; in the zygote returns None after telling ddprun its pid, in the worker
    returns the request."""
    go_read, go_write = os.pipe()
    pid_read, pid_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    middle = os.fork()
    if middle == 0:
        try:
            worker = os.fork()
            if worker != 0:
                os.write(pid_write, str(worker).encode())
        except BaseException:
            os._exit(1)
        if worker != 0:
            os._exit(0)
        sock.close()
        os.close(go_write)
        os.close(pid_read)
        os.close(pid_write)
        try:
            _reparented_worker(request, go_read)
        except BaseException as error:  # told on its stderr (or ddprun's, before its dup2), as exec's 127
            os.write(2, f"ddprun: the warm interpreter could not make this worker: {error!r}\n".encode())
            os._exit(127)
        return request
    os.close(go_read)
    os.close(pid_write)
    os.waitpid(middle, 0)  # the worker is ddprun's child from here on
    worker = os.read(pid_read, 32)
    os.close(pid_read)
    for fd in request["stdio"] + ([request["cgroup_procs"]] if request["cgroup_procs"] is not None else []):
        os.close(fd)
    if not worker:
        os.close(go_write)
        _send(sock, "error the intermediate process died before it forked")
        return None
    _send(sock, "pid " + worker.decode())
    os.write(go_write, b"g")
    os.close(go_write)
    return None


def _serve(sock):
    """Answers fork requests until ddprun closes the socket; returns the request in a worker."""
    while True:
        try:
            fields, fds = _recv_request(sock)
        except EOFError:
            sys.exit(0)
        request = _parse(fields, fds)
        why = _why_not_fork()
        if why is not None:
            for fd in fds:
                os.close(fd)
            _send(sock, "refused " + why)
            sys.exit(0)  # poisoned: ddprun starts a new one
        if _fork_worker(sock, request) is not None:
            return request


def _compile_error(path):
    """Why PROGRAM cannot run at all (it does not compile), found before the imports: its workers
    then start cold and fail at once, not after the import of torch. None when it compiles, or
    cannot be read (the workers say why, as cold ones would)."""
    try:
        _compile(path)
    except OSError:
        return None
    except (SyntaxError, ValueError) as error:  # ValueError: a NUL byte in the source
        return f"{path} does not compile: {type(error).__name__}: {error}"
    return None


def _compile(path):
    """PROGRAM's code, compiled as `python PROGRAM` compiles it: for the check above and the run."""
    with open(path, "rb") as f:
        return compile(f.read(), path, "exec", dont_inherit=True)


def _preload(modules):
    """Imports `modules`; a name after a "?" only where it exists (torch._dynamo: torch 2.x)."""
    import importlib
    import importlib.util
    for name in modules:
        if name.startswith("?"):
            name = name[1:]
            if importlib.util.find_spec(name) is None:
                continue
        importlib.import_module(name)


def _may_raise_priority_to(nice):
    """True when this process may set its nice value back to `nice` once it raised it: with
    CAP_SYS_NICE, or an RLIMIT_NICE that allows it (Linux lets anybody lower a priority, not
    raise it again)."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= 20 - nice:
        return True
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 23 & 1)  # CAP_SYS_NICE
    except (OSError, ValueError):
        pass
    return False


def _in_background():
    """--warm_start=auto: the imports at the lowest CPU priority (nice 19), beside the workers
    that train, where the priority can be taken back: a worker forked from the zygote inherits
    it. Returns what takes it back, which SIGUSR2 does too (ddprun sends it when workers wait
    for the imports); None where the imports run at the workers' priority."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= 19 or not _may_raise_priority_to(before):
        return None

    def take_back(*_):
        os.setpriority(os.PRIO_PROCESS, 0, before)

    signal.signal(signal.SIGUSR2, take_back)
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    return take_back


def _run_as_main(request):
    """Runs the program as `python -u` would, in a new __main__; exits as the interpreter does."""
    import runpy
    import types
    argv = [os.fsdecode(a) for a in request["argv"]]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = sys.orig_argv[:1] + ["-u"] + (["-m"] if request["kind"] == "module" else []) + argv
    import builtins
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    safe_path = getattr(sys.flags, "safe_path", False)  # -P, PYTHONSAFEPATH: no sys.path[0]
    if request["kind"] == "module":
        sys.argv = ["-m"] + argv[1:]
        if not safe_path:
            sys.path[0:0] = [os.getcwd()]
        runpy._run_module_as_main(argv[0], alter_argv=True)
        return
    sys.argv = argv
    path = argv[0] if os.path.isabs(argv[0]) else os.path.join(os.getcwd(), argv[0])  # unnormalised, as CPython
    if not safe_path:
        sys.path[0:0] = [os.path.dirname(os.path.realpath(argv[0]))]
    import importlib.machinery
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    exec(_compile(path), main.__dict__)


def _worker_main(request):
    _bootstrap_worker()
    try:
        _run_as_main(request)
    except SystemExit:
        raise
    except BaseException as error:
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # the program's frames only, as a cold start shows them
        sys.excepthook(type(error), error.with_traceback(tb), tb)
        if isinstance(error, KeyboardInterrupt):
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


def _main():
    fd = int(sys.argv[1])
    os.environ.pop("DDPRUN_ZYGOTE_ENV_ROOM", None)  # room for the workers' environments, not a variable of theirs
    if getattr(_start, "deferred_usercustomize", False):
        import site
        site.ENABLE_USER_SITE = True  # as `site` had it; its usercustomize runs in each worker
    if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
        del sys.path[0]  # this script's folder, which the workers' sys.path does not have
    for p in [p for p in sys.path_importer_cache if os.path.abspath(p or ".") in (_HERE, os.path.abspath(__file__))]:
        del sys.path_importer_cache[p]  # nor their path importer cache (sitecustomize.py does the same)
    sock = socket.socket(fileno=fd)
    sock.set_inheritable(False)
    # What DDP's first construction imports too (torch 2.x's torch._dynamo, 881 modules with
    # sympy): a forked worker's first step would otherwise import it.
    modules = ["torch", "torch.distributed", "?torch._dynamo"]
    modules += [m for m in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if m]
    why = _compile_error(sys.argv[3]) if len(sys.argv) > 4 and sys.argv[3] else None
    if why is not None:
        _send(sock, "failed " + why)
        sys.exit(1)
    take_back = _in_background() if os.environ.pop("DDPRUN_ZYGOTE_BACKGROUND", None) == "1" else None
    try:
        _preload(modules)
    except BaseException as error:
        names = ", ".join(m.lstrip("?") for m in modules)
        _send(sock, f"failed importing {names}: {type(error).__name__}: {error}")
        sys.exit(1)
    if take_back is not None:
        take_back()
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # a late one from ddprun (the workers restore it)
    why = _why_not_fork()
    if why is not None:
        _send(sock, "failed " + why + " after its imports")
        sys.exit(1)
    _send(sock, "ready")
    return _serve(sock)


_request = _main()
del _main, _serve, _fork_worker, _preload, _compile_error
_worker_main(_request)
