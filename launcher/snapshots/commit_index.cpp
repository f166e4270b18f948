#include "snapshots/commit_index.hpp"

#include <algorithm>
#include <sstream>

namespace ddprun::launcher {

namespace {

constexpr unsigned long kPfExiting = 0x4;  // include/linux/sched.h: set first thing in do_exit()

bool under(const std::string& path, const std::string& folder) {
  return path.size() > folder.size() && path.compare(0, folder.size(), folder) == 0 && path[folder.size()] == '/';
}

}  // namespace

WorkerSeen worker_seen(std::string_view stat) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos) return WorkerSeen::kGone;
  std::istringstream fields{std::string(stat.substr(close + 1))};
  std::string state;
  std::string skipped;
  unsigned long flags = 0;
  // state ppid pgrp session tty_nr tpgid flags
  if (!(fields >> state)) return WorkerSeen::kGone;
  for (int i = 0; i < 5; ++i) {
    if (!(fields >> skipped)) return WorkerSeen::kGone;
  }
  if (!(fields >> flags)) return WorkerSeen::kGone;
  if (state == "Z" || state == "X" || state == "x") return WorkerSeen::kZombie;
  if (flags & kPfExiting) return WorkerSeen::kExiting;
  return WorkerSeen::kRunning;
}

std::string uncommitted_why(const Uncommitted& f) {
  if (!f.closed) return "never closed";
  if (f.ranks.empty()) return "closed as the round's processes were killed";
  std::string ranks;
  for (int r : f.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return std::string("closed as rank") + (f.ranks.size() > 1 ? "s " : " ") + ranks + " ended";
}

std::string removed_line(const std::vector<Uncommitted>& files) {
  if (files.empty()) return "";
  constexpr std::size_t kNamed = 5;
  std::string names;
  for (std::size_t i = 0; i < files.size() && i < kNamed; ++i) {
    names += (i == 0 ? "" : ", ") + files[i].path + " (" + uncommitted_why(files[i]) + ")";
  }
  if (files.size() > kNamed) names += " and " + std::to_string(files.size() - kNamed) + " more";
  return "ddprun: snapshots: removed " + std::to_string(files.size()) + (files.size() == 1 ? " file" : " files") +
         " that may be half-written, so that no later round reads " + (files.size() == 1 ? "it" : "them") + ": " +
         names + "\n";
}

const CommitIndex::Entry* CommitIndex::find(const std::string& path) const {
  const auto it = entries_.find(path);
  return it == entries_.end() ? nullptr : &it->second;
}

// A close or rename by a live process: the bytes are whole. The same bytes closed again (opened
// for writing, nothing written) keep their number, so that nobody ships them twice.
void CommitIndex::commit(Entry& e, int round, const std::optional<FileIdentity>& now) {
  const bool same = e.state == State::kCommitted && (!now || *now == e.id);
  e.state = State::kCommitted;
  e.ranks.clear();
  e.doubts.clear();
  if (now) e.id = *now;
  if (same) return;
  e.seq = next_seq_++;
  e.round = round;
}

void CommitIndex::doubt(Entry& e, const Batch& b) {
  e.state = b.killed ? State::kHalfWritten : State::kDoubted;
  e.ranks.clear();
  e.doubts.clear();
  for (const auto& w : b.ending) {
    e.ranks.push_back(w.rank);
    if (!b.killed) e.doubts.push_back(w.pid);
  }
  std::sort(e.ranks.begin(), e.ranks.end());
  e.ranks.erase(std::unique(e.ranks.begin(), e.ranks.end()), e.ranks.end());
}

std::vector<SnapshotChange> CommitIndex::worker_ended(pid_t pid, bool killed) {
  for (auto& [path, e] : entries_) {
    if (e.state != State::kDoubted) continue;
    const auto it = std::find(e.doubts.begin(), e.doubts.end(), pid);
    if (it == e.doubts.end()) continue;
    if (killed) {
      e.state = State::kHalfWritten;
      e.doubts.clear();
      continue;
    }
    e.doubts.erase(it);
    if (e.doubts.empty()) commit(e, e.round, std::nullopt);
  }
  std::map<std::string, long long> before = announced_;
  return changes_since(before, 0);
}

void CommitIndex::moved_to(const FolderEvent& ev, const Batch& b) {
  const auto it = moving_.find(ev.cookie);
  if (it == moving_.end()) {
    // Moved in from outside the folder. A file was renamed into place by a live process: whole
    // (unless a rename of a file still being written, which a scan cannot tell: see README). A
    // folder's contents come as kFound events from the watch's scan of it.
    if (ev.folder) return;
    Entry& e = entries_[ev.path];
    e = Entry{};
    commit(e, b.round, ev.now);
    return;
  }
  Moving moving = std::move(it->second);
  moving_.erase(it);
  if (moving.folder) {
    for (auto& [below, entry] : moving.entries) entries_[ev.path + "/" + below] = std::move(entry);
    return;
  }
  // A file whose earlier events told nothing (made before a scan that missed it) is judged by
  // the rename alone.
  Entry e;
  e.state = State::kHalfWritten;
  if (!moving.entries.empty()) e = std::move(moving.entries.begin()->second);
  // The rename is the program's word that the file is whole, whatever the batch of its last close:
  // a live process made it, and a process renames what it finished (a close by a worker that died
  // beside it does not undo that). A file written to since its last close is still open: its
  // close decides.
  if (e.state != State::kWriting) commit(e, b.round, ev.now);
  if (ev.now) e.id = *ev.now;
  entries_[ev.path] = std::move(e);
}

std::vector<SnapshotChange> CommitIndex::apply(const Batch& b) {
  using Kind = FolderEvent::Kind;
  std::map<std::string, bool> seen;  // complete_scan: the paths found
  for (const FolderEvent& ev : b.events) {
    switch (ev.kind) {
      case Kind::kCreated: {
        Entry& e = entries_[ev.path];
        e = Entry{};
        e.round = b.round;
        if (ev.now) e.id = *ev.now;
        break;
      }
      case Kind::kModified: {
        const auto it = entries_.find(ev.path);
        if (it == entries_.end() && !ev.now) break;  // a file removed since: nothing to track
        Entry& e = entries_[ev.path];
        e.state = State::kWriting;
        e.ranks.clear();
        e.doubts.clear();
        break;
      }
      case Kind::kClosed: {
        const auto it = entries_.find(ev.path);
        // A late close of a file removed since (the round's end removed it; its writer's close
        // came after): not a file any more.
        if (it == entries_.end() && !ev.now) break;
        Entry& e = entries_[ev.path];
        if (b.killed || !b.ending.empty()) {
          doubt(e, b);
          e.round = b.round;
          if (ev.now) e.id = *ev.now;
        } else {
          commit(e, b.round, ev.now);
        }
        break;
      }
      case Kind::kLinked: {
        Entry& e = entries_[ev.path];
        e = Entry{};
        commit(e, b.round, ev.now);
        break;
      }
      case Kind::kMovedFrom: {
        Moving moving{ev.path, {}, ev.folder, 0};
        if (ev.folder) {
          for (auto it = entries_.begin(); it != entries_.end();) {
            if (under(it->first, ev.path)) {
              moving.entries[it->first.substr(ev.path.size() + 1)] = std::move(it->second);
              it = entries_.erase(it);
            } else {
              ++it;
            }
          }
        } else if (const auto it = entries_.find(ev.path); it != entries_.end()) {
          moving.entries[""] = std::move(it->second);
          entries_.erase(it);
        }
        moving_[ev.cookie] = std::move(moving);
        break;
      }
      case Kind::kMovedTo: moved_to(ev, b); break;
      case Kind::kDeleted: entries_.erase(ev.path); break;
      case Kind::kFound: {
        seen[ev.path] = true;
        const auto it = entries_.find(ev.path);
        // Unchanged since it was committed: still committed, whatever else happened.
        if (it != entries_.end() && it->second.state == State::kCommitted && ev.now && *ev.now == it->second.id) break;
        Entry& e = entries_[ev.path];
        if (ev.open_for_writing) {
          e.state = State::kWriting;
          e.ranks.clear();
          e.doubts.clear();
        } else if (b.killed || !b.ending.empty()) {
          doubt(e, b);
          e.round = b.round;
        } else {
          commit(e, b.round, ev.now);
        }
        if (ev.now) e.id = *ev.now;
        break;
      }
    }
  }
  // A rename whose other half did not come in the batch it was read in gets the next one; then
  // it was a move out of the folder.
  for (auto it = moving_.begin(); it != moving_.end();) {
    it = it->second.batches++ > 0 ? moving_.erase(it) : std::next(it);
  }
  if (b.complete_scan) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = seen.count(it->first) ? std::next(it) : entries_.erase(it);
    }
    moving_.clear();
  }
  std::map<std::string, long long> before = announced_;
  return changes_since(before, b.round);
}

std::vector<Uncommitted> CommitIndex::end_round(std::vector<SnapshotChange>* changes) {
  moving_.clear();  // a rename never paired: moved out of the folder
  std::vector<Uncommitted> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.state == State::kCommitted) {
      ++it;
      continue;
    }
    const State state = it->second.state;
    out.push_back({it->first, state == State::kHalfWritten || state == State::kDoubted, it->second.ranks});
    it = entries_.erase(it);
  }
  std::map<std::string, long long> before = announced_;
  auto step = changes_since(before, 0);
  if (changes) *changes = std::move(step);
  return out;
}

std::map<std::string, long long> CommitIndex::committed_view() const {
  std::map<std::string, long long> view;
  for (const auto& [path, e] : entries_) {
    if (e.state == State::kCommitted) view[path] = e.seq;
  }
  // A file or folder moved away, its other half not read yet: where it was, until then.
  for (const auto& [cookie, moving] : moving_) {
    for (const auto& [below, e] : moving.entries) {
      if (e.state == State::kCommitted) view[below.empty() ? moving.path : moving.path + "/" + below] = e.seq;
    }
  }
  return view;
}

std::vector<SnapshotChange> CommitIndex::changes_since(const std::map<std::string, long long>& before, int round) {
  const std::map<std::string, long long> after = committed_view();
  std::map<long long, std::string> was_at;
  for (const auto& [path, seq] : before) was_at[seq] = path;
  std::vector<SnapshotChange> changes;
  for (const auto& [path, seq] : before) {
    if (after.count(path) == 0) changes.push_back({SnapshotChange::Kind::kRemoved, path, 0, "", {}, round});
  }
  for (const auto& [path, seq] : after) {
    const auto old = before.find(path);
    if (old != before.end() && old->second == seq) continue;
    SnapshotChange c{SnapshotChange::Kind::kCommitted, path, seq, "", {}, round};
    if (const auto from = was_at.find(seq); from != was_at.end()) c.from = from->second;
    if (const auto e = entries_.find(path); e != entries_.end()) {
      c.id = e->second.id;
      c.round = e->second.round;
    }
    changes.push_back(std::move(c));
  }
  announced_ = after;
  return changes;
}

}  // namespace ddprun::launcher
