// The processes as /proc shows them: each one's /proc/PID/stat, read here only (the orphan guard
// reads it too); the processes below a worker, for the stack tools, which look for the Python
// interpreter a worker runs (itself, or a descendant: `sh -c "python3 x.py"`, a bash script that
// starts python as a child), and for the end of a round, which kills what was re-parented to ddprun.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// What /proc/PID/stat says of a process, of the fields ddprun reads (proc(5)).
struct ProcStat {
  pid_t pid = 0;
  char state = 0;  // 'R', 'S', 'D', ...; 'Z' a zombie, 'X' dead
  pid_t parent = 0;
  pid_t process_group = 0;
  // Where its arguments are in its memory (fields 48 and 49, Linux 3.5); 0 where not given.
  unsigned long long arg_start = 0;
  unsigned long long arg_end = 0;
};

// `text`, a /proc/PID/stat ("pid (comm) state ppid pgrp ..."; comm may hold spaces and
// parentheses); nullopt when it is not one.
std::optional<ProcStat> parse_proc_stat(std::string_view text);
// The /proc/PID/stat of `pid`; nullopt when it is gone.
std::optional<ProcStat> proc_stat(pid_t pid);
// Every process's, zombies too: one pass over /proc. The children files
// (/proc/PID/task/TID/children) would need one read per thread and are missing on kernels without
// CONFIG_PROC_CHILDREN.
std::vector<ProcStat> all_proc_stats();

// The live (not zombie) processes whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent);

// `root` and its live descendants, breadth first: `root`, its children, their children...
std::vector<pid_t> process_tree(pid_t root);

// Whether `pid` runs a Python interpreter: its executable (/proc/PID/exe) is named like one
// (config::python_interpreter_name: python3, python3.11), or it has libpython mapped (an
// interpreter under another name, a program that embeds Python).
bool runs_python(pid_t pid);

// The first process of process_tree(`root`) that runs_python(); 0 when none does.
pid_t python_process(pid_t root);

// This process's PID namespace ("4026531836" of "pid:[4026531836]"): a pid means something only
// inside it, and containers sharing a /tmp or a cgroup may run ddprun in others.
std::string pid_namespace();

// The pid in NAME when NAME is "<prefix><pid>" or "<prefix><pid>.<anything>" and no process
// of that pid exists (in this PID namespace); 0 otherwise. What ddprun processes that are gone
// left behind is named so: "ddprun.<pid namespace>.<pid>...".
pid_t dead_pid_in_name(const std::string& name, const std::string& prefix);

}  // namespace ddprun::launcher
