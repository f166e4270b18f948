// The processes below a worker, as /proc shows them: for the stack tools, which look for the
// Python interpreter a worker runs (itself, or a descendant: `sh -c "python3 x.py"`, a bash
// script that starts python as a child), and for the end of a round, which kills what was
// re-parented to ddprun.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::launcher {

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
