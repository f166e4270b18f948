// The snapshot folder watched for committed files (issue 57): inotify on the folder and every
// folder below it, read on the agent's loop; after each read, this node's workers are looked at in
// /proc, and the batch goes to CommitIndex (commit_index.hpp), which decides. At a round's end, the
// files that are not committed are removed from the folder, so that no later round reads a
// half-written file. The rule and its limits: launcher/snapshots/README.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "ddprun/unique_fd.hpp"
#include "snapshots/commit_index.hpp"

namespace ddprun::launcher {

class CommitWatch {
 public:
  struct Worker {
    pid_t pid = -1;
    int rank = 0;
    bool killed = false;  // reaped(): it ended by a signal
  };
  struct Hooks {
    std::function<std::vector<Worker>()> workers;  // this node's workers that are not reaped yet
    std::function<void(const std::string&)> say;   // one line to the console
    // The files a round's end removed (none: not called), for the event log.
    std::function<void(const std::vector<Uncommitted>&)> removed;
    // The changes to the committed files, in order (for replication; may be unset).
    std::function<void(const std::vector<SnapshotChange>&)> changed;
  };

  // Watches `folder` (the snapshot folder, made), and counts every file in it as committed (a kept
  // folder that a requeue finds). `instance`: the inotify instance to use (OrphanGuard's, whose
  // close is cheap); invalid: one is made here. Says one line, and decides nothing (removes
  // nothing), where the folder cannot be watched (the user's inotify instances or watches ran out).
  CommitWatch(asio::io_context& io, UniqueFd instance, std::string folder, Hooks hooks);
  ~CommitWatch();
  CommitWatch(const CommitWatch&) = delete;
  CommitWatch& operator=(const CommitWatch&) = delete;

  // The round the next batches belong to.
  void set_round(int round) { round_ = round; }
  // Workers were reaped (waitpid): every close they made is queued now, so what is queued is read
  // at once, with them among the ending workers, and then how each ended decides the closes made
  // while it was ending; they are in no later batch.
  void reaped(const std::vector<Worker>& ended);
  // The round's end (every worker ended, what they left behind killed): what is queued is read (no
  // close in it is a commit: those processes were just killed), and the files that are not
  // committed are removed from the folder, with one line and the `removed` hook.
  void end_round();

  // The job's end, before the folder is removed or unmounted: every watch goes (the orphan guard
  // holds the instance beyond ddprun's exit, and a watch holds the folder's file system busy).
  void stop();

  const CommitIndex& index() const { return index_; }

 private:
  struct Raw {
    int wd = -1;
    std::uint32_t mask = 0;
    std::uint32_t cookie = 0;
    std::string name;
  };
  void wait();
  // Reads every queued event, looks at the workers (after the read: see README), decides.
  void read_batch(const std::vector<Worker>& reaped, bool killed);
  std::vector<Raw> read_queued(bool* overflowed);
  // Adds watches to `relative` (a folder) and every folder below it; `found` gets its files.
  void watch_tree(const std::string& relative, std::vector<FolderEvent>* found, const std::vector<std::string>& open);
  void forget_tree(const std::string& relative);
  // One line, and nothing decided from now on.
  void cannot_watch(const std::string& path, int error, const char* limit);
  std::vector<FolderEvent> events_of(const std::vector<Raw>& raw, const std::vector<std::string>& open);
  // The files below the folder that a live worker holds open for writing (a scan's question).
  std::vector<std::string> open_for_writing() const;
  void changed(const std::vector<SnapshotChange>& changes);

  asio::posix::stream_descriptor inotify_;
  asio::steady_timer pause_;  // between two reads of the loop's own
  std::string root_;
  Hooks hooks_;
  std::map<int, std::string> folder_of_watch_;  // watch descriptor -> folder below root_ ("": root_)
  CommitIndex index_;
  int round_ = 0;
  bool watching_ = true;  // false: a watch could not be added, nothing is decided
};

}  // namespace ddprun::launcher
