// Keeping every descendant of the workers inside the job, also those that leave the worker's
// process group: a child in its own session (setsid, `start_new_session=True`, tensorboard) or a
// double-forked daemon.
//
// Where ddprun may create a cgroup (cgroup v2: a writable unified hierarchy, as root or with
// systemd delegation), every worker starts in a cgroup of its round below ddprun's
// (`ddprun.<pid namespace>.<pid>/round.<N>`; made there by clone3, else moved in before it execs), and all its
// descendants stay there whatever they do: the end of a round kills the cgroup (cgroup.kill),
// and so does the orphan guard when ddprun itself is SIGKILLed. Elsewhere ddprun falls back to
// what a child subreaper sees: descendants whose parents died are re-parented to ddprun, and the
// end of a round kills them; a SIGKILLed ddprun then stops only the workers' process groups.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

class Containment {
 public:
  // Makes the cgroup `ddprun.<pid namespace>.<pid>` under ddprun's own when it can; else the subreaper
  // fallback, and why_not() says why.
  // Where ddprun's cgroup would be: `ddprun.<pid namespace>.<pid>` under ddprun's own cgroup; "" without a
  // cgroup v2 hierarchy, or with DDPRUN_CGROUP=0 in `environ` (the fallback). Known before it
  // exists, so that the orphan guard, forked first, can remove it whenever ddprun dies.
  static std::string planned_path(const std::map<std::string, std::string>& environ);
  // Makes the cgroup at `path` when it can; else the subreaper fallback, and why_not() says why.
  static std::unique_ptr<Containment> create(const std::string& path);
  // The cgroups beside `planned` of ddprun processes of this PID namespace that are gone, with
  // whatever still runs in them, killed and removed: a ddprun SIGKILLed together with its
  // orphan guard (a kill of their whole process group) leaves its workers' escapes there. For
  // the orphan guard's chores, off the start's path.
  static void remove_stale(const std::string& planned);
  ~Containment();
  Containment(const Containment&) = delete;
  Containment& operator=(const Containment&) = delete;

  bool has_cgroup() const { return static_cast<bool>(procs_); }
  const std::string& cgroup_path() const { return path_; }  // "" without a cgroup
  const std::string& why_not() const { return why_not_; }
  // Makes this round's cgroup (`round.<N>` below ddprun's) unless it exists; without a cgroup,
  // or where it cannot be made, the workers join ddprun's cgroup itself (procs_fd()).
  void prepare_round();
  // The folder of this round's cgroup (`round.<N>` below ddprun's), for clone3 to make a new
  // worker there; -1 without one.
  int dir_fd() const { return round_dir_.get(); }
  // That cgroup's cgroup.procs (or ddprun's, where it could not be made), for a new worker to
  // write "0" to (itself) before it execs where clone3 cannot; -1 without a cgroup.
  int procs_fd() const { return round_procs_ ? round_procs_.get() : procs_.get(); }

  // The memory controller's view of this round's workers: the oom_kill count of memory.events
  // and memory.peak (bytes) in the nearest cgroup holding them that has the controller, up to
  // ddprun's own; nullopt without a cgroup or without the controller on the way.
  struct MemoryEvents {
    long long oom_kills = 0;
    std::optional<long long> peak;
  };
  std::optional<MemoryEvents> memory_events() const;

  // Kills every process of the job that is still there: the whole cgroup, or the children of
  // ddprun except `keep` (the orphan guard), until none is left or a second has passed. With a
  // cgroup, this round's cgroup is retired: the next round gets a new one.
  void kill_all(const std::set<pid_t>& keep);
  // Removes the cgroups of rounds that kill_all() retired. Call once the next round's workers
  // run: a cgroup's rmdir leaves the kernel work (under the cgroups' global lock, after an RCU
  // grace period) that made the next mkdir, and the clone3 into it, wait 2 to 4 ms between a
  // worker's failure and its restart.
  void remove_retired();

  // The cgroup's processes killed and the cgroup removed (for the orphan guard, which has no
  // Containment of its own after fork: plain functions of the path).
  static void kill_cgroup(const std::string& path);
  static bool remove_cgroup(const std::string& path);

 private:
  Containment() = default;
  void remove_round_cgroup();
  void retire_round_cgroup();
  // rmdir of `path` and every cgroup below it (retried while a killed process is still leaving).
  static bool remove_tree(const std::string& path);
  std::string path_;
  UniqueFd procs_;
  int rounds_ = 0;
  std::string round_path_;
  std::vector<std::string> retired_;  // killed and emptied rounds' cgroups, not removed yet
  UniqueFd round_dir_;
  UniqueFd round_procs_;
  bool emptied_ = true;  // no worker was put in since the last kill_all() saw the cgroup empty
  std::string why_not_;
};

// The out-of-memory kills the kernel has counted on the whole host since it booted: `oom_kill`
// of /proc/vmstat (Linux 4.13 and later); nullopt where it is not there.
// What tells an outside SIGKILL from the OOM killer's where ddprun has no cgroup of its own.
std::optional<long long> kernel_oom_kills();
// That count in the text of /proc/vmstat; nullopt without an `oom_kill` line.
std::optional<long long> parse_vmstat_oom_kills(std::string_view vmstat);

}  // namespace ddprun::launcher
