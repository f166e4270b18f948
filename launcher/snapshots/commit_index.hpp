// Which files of the snapshot folder are committed (issue 57): whole, as their writer meant them,
// so that a later round (and, later, another node) may be shown them. Pure: the inotify events of
// one read (a batch) and what ddprun saw of its workers after that read in, the changes to the
// committed files out; the folder's watch (commit_watch.hpp) does the reading and the removal.
// Tested as tables (tests/launcher/commit_index_test.cpp); the rule, and why it holds, is in
// launcher/snapshots/README.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// What a worker's /proc/PID/stat said right after a batch was read.
enum class WorkerSeen {
  kRunning,  // neither a zombie nor exiting: every close it made so far was its own
  kExiting,  // PF_EXITING: do_exit() has begun and may be closing its files
  kZombie,   // Z or X: its files are closed, not reaped yet
  kGone,     // no such process (or unreadable): reaped by someone, and nothing known of its closes
};
// Parses /proc/PID/stat's text (the state, 3rd field, and the flags, 9th; the command name in
// parentheses may hold anything). An empty or unparsable text is kGone.
WorkerSeen worker_seen(std::string_view stat);

// What identifies a file's bytes cheaply: its inode, size and modification time.
struct FileIdentity {
  unsigned long long inode = 0;
  unsigned long long size = 0;
  long long mtime_ns = 0;
  bool operator==(const FileIdentity& o) const { return inode == o.inode && size == o.size && mtime_ns == o.mtime_ns; }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

// One inotify event, as a path relative to the folder (or a file a scan found).
struct FolderEvent {
  enum class Kind {
    kCreated,    // IN_CREATE of a file
    kModified,   // IN_MODIFY: a write or a truncation
    kClosed,     // IN_CLOSE_WRITE: closed after being opened for writing
    kMovedFrom,  // IN_MOVED_FROM (`folder`: a folder, everything under it moves)
    kMovedTo,    // IN_MOVED_TO, paired with its kMovedFrom by `cookie`
    kDeleted,    // IN_DELETE of a file
    kLinked,     // IN_CREATE of a symbolic link: whole as it is made
    kFound,      // a file a scan found (the start, a new folder's contents, an overflow's rescan)
  };
  Kind kind = Kind::kCreated;
  std::string path;
  bool folder = false;
  std::uint32_t cookie = 0;
  std::optional<FileIdentity> now;  // lstat() when the batch was read; nullopt: not there any more
  bool open_for_writing = false;    // kFound: a live worker holds it open for writing
};

// One read of the inotify instance and what ddprun knew right after it.
struct Batch {
  std::vector<FolderEvent> events;
  // The workers seen ending after the read (exiting or a zombie), or reaped right before it (every
  // close of theirs was queued then): a close in the batch may be one their death made. How they
  // ended decides it (CommitIndex::worker_ended()).
  struct Ending {
    pid_t pid = -1;
    int rank = 0;
  };
  std::vector<Ending> ending;
  // A close in it may be a killed process's, and no end will tell (the round's end, when ddprun has
  // just killed what the workers left behind): never a commit.
  bool killed = false;
  // The events are a scan of the whole folder (the start, or after IN_Q_OVERFLOW): a file the index
  // holds that is not among them is gone.
  bool complete_scan = false;
  int round = 0;
};

// A change to the committed files, for the one who ships them (replication): "`path` now holds the
// committed bytes `seq`" or "`path` holds no committed bytes any more". The changes of one batch are
// one step, applied against the state before it: a `from` names where those bytes were before the
// step (a rename), else they are read at `path`, where they were seen as `id`.
struct SnapshotChange {
  enum class Kind { kCommitted, kRemoved };
  Kind kind = Kind::kCommitted;
  std::string path;
  long long seq = 0;  // kCommitted: the bytes' number, growing with each commit; a rename keeps it
  std::string from;   // kCommitted by a rename: the path these bytes had before the step
  FileIdentity id;    // kCommitted: what the bytes were seen as (a shipper checks it before and after)
  int round = 0;      // the round whose batch committed them
  bool operator==(const SnapshotChange& o) const {
    return kind == o.kind && path == o.path && seq == o.seq && from == o.from;
  }
};

// A file that was not committed at a round's end (removed from the folder then).
struct Uncommitted {
  std::string path;
  bool closed = false;     // closed as workers were ending (else written and never closed, or found open)
  std::vector<int> ranks;  // closed: the ranks that were ending then (none: the round's end's kill)
};

// What is known of why `file` was not committed: "never closed", "closed as rank 1 ended", ...
std::string uncommitted_why(const Uncommitted& file);

// The line that says which files a round's end removed and why ("" for none): at most a few
// names, each with what is known of it (the ranks that were ending when it was closed, or that it
// was never closed).
std::string removed_line(const std::vector<Uncommitted>& files);

class CommitIndex {
 public:
  enum class State {
    kCommitted,
    kWriting,      // written since its last close (or a scan found it open for writing)
    kDoubted,      // closed as workers were ending, not all their ends known yet
    kHalfWritten,  // closed as a worker was killed (or by ddprun's kill at a round's end)
  };
  struct Entry {
    State state = State::kWriting;
    long long seq = 0;  // kCommitted
    int round = 0;
    FileIdentity id;
    std::vector<int> ranks;     // kDoubted, kHalfWritten: the ranks ending when it was closed
    std::vector<pid_t> doubts;  // kDoubted: the workers whose end is still to know
  };

  // Applies one batch; returns the changes to the committed files, in path order, removals first.
  std::vector<SnapshotChange> apply(const Batch& batch);
  // The worker `pid` was reaped, `killed` by a signal or not (it exited, by its own choice: its
  // files were closed as its program left them, as when it closes them itself). The files closed
  // while it was ending are half-written if it was killed; else committed once no other doubt is
  // left on them. Returns the changes.
  std::vector<SnapshotChange> worker_ended(pid_t pid, bool killed);
  // A round's end (every worker ended): the files that are not committed, taken out of the index
  // for the caller to remove from the folder, with a rename still unpaired treated as a move out.
  std::vector<Uncommitted> end_round(std::vector<SnapshotChange>* changes);

  const Entry* find(const std::string& path) const;
  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  struct Moving {
    std::string path;
    std::map<std::string, Entry> entries;  // a file: one, under ""; a folder: by their path below it
    bool folder = false;
    int batches = 0;  // carried into the next batch once, where its kMovedTo may be
  };
  void commit(Entry& e, int round, const std::optional<FileIdentity>& now);
  // A close (or a scan's find) in a batch with workers ending.
  static void doubt(Entry& e, const Batch& b);
  void moved_to(const FolderEvent& ev, const Batch& b);
  std::map<std::string, long long> committed_view() const;
  std::vector<SnapshotChange> changes_since(const std::map<std::string, long long>& before, int round);

  std::map<std::string, Entry> entries_;
  std::map<std::uint32_t, Moving> moving_;      // by cookie
  std::map<std::string, long long> announced_;  // the committed files as the last changes told them
  long long next_seq_ = 1;
};

}  // namespace ddprun::launcher
