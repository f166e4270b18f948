#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "snapshots/commit_index.hpp"

using namespace ddprun::launcher;
using Kind = FolderEvent::Kind;
using State = CommitIndex::State;

namespace {

FileIdentity id_of(unsigned long long inode, unsigned long long size = 10) { return {inode, size, 1000}; }

FolderEvent ev(Kind kind, const std::string& path, std::uint32_t cookie = 0, bool folder = false) {
  FolderEvent e;
  e.kind = kind;
  e.path = path;
  e.folder = folder;
  e.cookie = cookie;
  if (!folder) e.now = id_of(1);
  return e;
}

FolderEvent gone(Kind kind, const std::string& path) {
  FolderEvent e;
  e.kind = kind;
  e.path = path;
  return e;
}

FolderEvent found(const std::string& path, FileIdentity id, bool open = false) {
  FolderEvent e;
  e.kind = Kind::kFound;
  e.path = path;
  e.now = id;
  e.open_for_writing = open;
  return e;
}

// A batch read while the workers of `ranks` were ending (pid 100 + rank each).
Batch batch(std::vector<FolderEvent> events, std::vector<int> ranks = {}) {
  Batch b;
  b.events = std::move(events);
  for (int r : ranks) b.ending.push_back({100 + r, r});
  b.round = 1;
  return b;
}

// The round's end's read: what ddprun just killed may have closed them.
Batch killed(std::vector<FolderEvent> events) {
  Batch b = batch(std::move(events));
  b.killed = true;
  return b;
}

std::string state_of(const CommitIndex& index, const std::string& path) {
  const CommitIndex::Entry* e = index.find(path);
  if (e == nullptr) return "none";
  switch (e->state) {
    case State::kCommitted: return "committed";
    case State::kWriting: return "writing";
    case State::kDoubted: return "doubted";
    case State::kHalfWritten: return "half-written";
  }
  return "?";
}

// The changes as "+path" (committed here), "+path<from" (bytes moved from `from`), "-path".
std::string words(const std::vector<SnapshotChange>& changes) {
  std::string out;
  for (const auto& c : changes) {
    if (!out.empty()) out += " ";
    out += (c.kind == SnapshotChange::Kind::kRemoved ? "-" : "+") + c.path + (c.from.empty() ? "" : "<" + c.from);
  }
  return out;
}

}  // namespace

TEST_CASE("a worker as /proc/PID/stat shows it: running, exiting (PF_EXITING), a zombie, gone") {
  struct Row {
    const char* stat;
    WorkerSeen seen;
  };
  const std::vector<Row> rows = {
      {"42 (python3) S 1 42 42 0 -1 4194560 100 0 0 0", WorkerSeen::kRunning},
      {"42 (python3) R 1 42 42 0 -1 4194304 100 0 0 0", WorkerSeen::kRunning},
      {"42 (python3) D 1 42 42 0 -1 4194308 100 0 0 0", WorkerSeen::kExiting},  // 0x400004: PF_EXITING
      {"42 (python3) R 1 42 42 0 -1 4 100 0 0 0", WorkerSeen::kExiting},
      {"42 (python3) Z 1 42 42 0 -1 4194308 100 0 0 0", WorkerSeen::kZombie},
      {"42 (python3) X 1 42 42 0 -1 4194308 100 0 0 0", WorkerSeen::kZombie},
      // The name may hold spaces and parentheses: the fields start after the last ')'.
      {"42 (a) Z (b) S 1 42 42 0 -1 4194304 100", WorkerSeen::kRunning},
      {"42 (a) R (b) Z 1 42 42 0 -1 4194304 100", WorkerSeen::kZombie},
      {"", WorkerSeen::kGone},
      {"42 (python3", WorkerSeen::kGone},
      {"42 (python3) S 1 42", WorkerSeen::kGone},
  };
  for (const Row& row : rows) {
    CAPTURE(row.stat);
    CHECK(worker_seen(row.stat) == row.seen);
  }
}

TEST_CASE("a close commits a file when no worker was ending; one made as a worker ended waits for how it ended") {
  struct End {
    int rank;
    bool killed;
  };
  struct Row {
    const char* what;
    std::vector<Batch> batches;
    std::vector<End> ends;  // workers reaped after the batches (pid 100 + rank)
    const char* state;
    const char* changes;  // of the last step
  };
  const auto written = [] { return batch({ev(Kind::kCreated, "a"), ev(Kind::kModified, "a")}); };
  const auto committed = [] { return batch({ev(Kind::kCreated, "a"), ev(Kind::kClosed, "a")}); };
  const std::vector<Row> rows = {
      {"written and closed, every worker alive",
       {batch({ev(Kind::kCreated, "a"), ev(Kind::kModified, "a"), ev(Kind::kClosed, "a")})},
       {},
       "committed",
       "+a"},
      {"created, written, not closed yet", {written()}, {}, "writing", ""},
      {"closed while rank 1 was ending (exiting, a zombie, or reaped just before the read)",
       {written(), batch({ev(Kind::kClosed, "a")}, {1})},
       {},
       "doubted",
       ""},
      {"... and rank 1 was killed (SIGKILL, SIGSEGV, the OOM killer)",
       {written(), batch({ev(Kind::kClosed, "a")}, {1})},
       {{1, true}},
       "half-written",
       ""},
      {"... and rank 1 exited (its own choice): its files as it left them",
       {written(), batch({ev(Kind::kClosed, "a")}, {1})},
       {{1, false}},
       "committed",
       "+a"},
      {"closed while ranks 0 and 1 were ending: 0 exited, 1 was killed",
       {written(), batch({ev(Kind::kClosed, "a")}, {0, 1})},
       {{0, false}, {1, true}},
       "half-written",
       ""},
      {"closed while ranks 0 and 1 were ending: both exited",
       {written(), batch({ev(Kind::kClosed, "a")}, {0, 1})},
       {{0, false}, {1, false}},
       "committed",
       "+a"},
      {"closed while ranks 0 and 1 were ending: only 0's end known yet",
       {written(), batch({ev(Kind::kClosed, "a")}, {0, 1})},
       {{0, false}},
       "doubted",
       ""},
      {"another worker's end does not decide it",
       {written(), batch({ev(Kind::kClosed, "a")}, {1})},
       {{2, true}},
       "doubted",
       ""},
      {"closed at the round's end, when ddprun has just killed what was left",
       {written(), killed({ev(Kind::kClosed, "a")})},
       {},
       "half-written",
       ""},
      {"the close read apart from its writes: the close's batch decides",
       {batch({ev(Kind::kCreated, "a"), ev(Kind::kModified, "a")}, {0}), batch({ev(Kind::kClosed, "a")})},
       {},
       "committed",
       "+a"},
      {"a committed file written again: no longer committed",
       {committed(), batch({ev(Kind::kModified, "a")})},
       {},
       "writing",
       "-a"},
      {"a committed file rewritten and closed by a killed worker",
       {committed(), batch({ev(Kind::kModified, "a")}), batch({ev(Kind::kClosed, "a")}, {0})},
       {{0, true}},
       "half-written",
       ""},
      {"a committed file opened for writing by a dying worker, nothing written: its close is doubted too",
       {committed(), batch({ev(Kind::kClosed, "a")}, {0})},
       {},
       "doubted",
       "-a"},
      {"a committed file closed again, unchanged, by a live one: no new commit",
       {committed(), batch({ev(Kind::kClosed, "a")})},
       {},
       "committed",
       ""},
      {"a late close of a file removed since: nothing", {batch({gone(Kind::kClosed, "a")})}, {}, "none", ""},
      {"deleted", {committed(), batch({gone(Kind::kDeleted, "a")})}, {}, "none", "-a"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    CommitIndex index;
    std::vector<SnapshotChange> last;
    for (const Batch& b : row.batches) last = index.apply(b);
    for (const End& e : row.ends) last = index.worker_ended(100 + e.rank, e.killed);
    CHECK(state_of(index, "a") == row.state);
    CHECK(words(last) == row.changes);
  }
  CommitIndex index;
  CHECK(words(index.apply(batch({ev(Kind::kLinked, "latest")}, {0}))) == "+latest");  // whole as it is made
  CHECK(words(index.apply(batch({ev(Kind::kCreated, "d/e/a"), ev(Kind::kClosed, "d/e/a")}))) == "+d/e/a");
}

TEST_CASE("a rename commits the file at its new name, unless it is still being written") {
  struct Row {
    const char* what;
    std::vector<Batch> batches;
    const char* tmp;
    const char* ckpt;
    const char* changes;  // of the last batch
  };
  const std::vector<Row> rows = {
      {"tmp written, closed, renamed over the last checkpoint: the bytes move",
       {batch({ev(Kind::kCreated, "ckpt"), ev(Kind::kClosed, "ckpt")}),
        batch({ev(Kind::kCreated, "tmp"), ev(Kind::kModified, "tmp"), ev(Kind::kClosed, "tmp")}),
        batch({ev(Kind::kMovedFrom, "tmp", 7), ev(Kind::kMovedTo, "ckpt", 7)})},
       "none",
       "committed",
       "-tmp +ckpt<tmp"},
      {"tmp closed while another worker died, then renamed by its live writer: committed",
       {batch({ev(Kind::kCreated, "tmp"), ev(Kind::kModified, "tmp")}), batch({ev(Kind::kClosed, "tmp")}, {1}),
        batch({ev(Kind::kMovedFrom, "tmp", 7), ev(Kind::kMovedTo, "ckpt", 7)})},
       "none",
       "committed",
       "+ckpt"},
      {"tmp renamed while still open for writing: not committed until its close",
       {batch({ev(Kind::kCreated, "tmp"), ev(Kind::kModified, "tmp"), ev(Kind::kMovedFrom, "tmp", 7),
               ev(Kind::kMovedTo, "ckpt", 7)})},
       "none",
       "writing",
       ""},
      {"... and its writer killed before the close",
       {batch({ev(Kind::kCreated, "tmp"), ev(Kind::kModified, "tmp"), ev(Kind::kMovedFrom, "tmp", 7),
               ev(Kind::kMovedTo, "ckpt", 7)}),
        batch({ev(Kind::kClosed, "ckpt")}, {0})},
       "none",
       "doubted",
       ""},
      {"tmp's writer dying mid-write, no rename: the last checkpoint stays committed",
       {batch({ev(Kind::kCreated, "ckpt"), ev(Kind::kClosed, "ckpt")}),
        batch({ev(Kind::kCreated, "tmp"), ev(Kind::kModified, "tmp")}), batch({ev(Kind::kClosed, "tmp")}, {0})},
       "doubted",
       "committed",
       ""},
      {"the two halves of a rename read apart",
       {batch({ev(Kind::kCreated, "tmp"), ev(Kind::kClosed, "tmp")}), batch({ev(Kind::kMovedFrom, "tmp", 7)}),
        batch({ev(Kind::kMovedTo, "ckpt", 7)})},
       "none",
       "committed",
       "-tmp +ckpt<tmp"},
      {"moved out of the folder (no other half in the next read): gone",
       {batch({ev(Kind::kCreated, "tmp"), ev(Kind::kClosed, "tmp")}), batch({ev(Kind::kMovedFrom, "tmp", 7)}),
        batch({ev(Kind::kCreated, "x")})},
       "none",
       "none",
       "-tmp"},
      {"moved in from outside: whole", {batch({ev(Kind::kMovedTo, "ckpt", 9)})}, "none", "committed", "+ckpt"},
      // Each event's path is looked at once the batch is read: by then tmp had its new name.
      {"made, written, closed and renamed in one read",
       {batch({gone(Kind::kCreated, "tmp"), gone(Kind::kModified, "tmp"), gone(Kind::kClosed, "tmp"),
               ev(Kind::kMovedFrom, "tmp", 7), ev(Kind::kMovedTo, "ckpt", 7)},
              {0})},
       "none",
       "committed",
       "+ckpt"},
      {"made and written, then renamed in one read, still open",
       {batch({gone(Kind::kCreated, "tmp"), gone(Kind::kModified, "tmp"), ev(Kind::kMovedFrom, "tmp", 7),
               ev(Kind::kMovedTo, "ckpt", 7)})},
       "none",
       "writing",
       ""},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    CommitIndex index;
    std::vector<SnapshotChange> last;
    for (const Batch& b : row.batches) last = index.apply(b);
    CHECK(state_of(index, "tmp") == row.tmp);
    CHECK(state_of(index, "ckpt") == row.ckpt);
    CHECK(words(last) == row.changes);
  }
}

TEST_CASE("a folder moved within the folder takes its files' states along; moved out, they are gone") {
  CommitIndex index;
  index.apply(batch({ev(Kind::kCreated, "d/a"), ev(Kind::kClosed, "d/a"), ev(Kind::kCreated, "d/e/b"),
                     ev(Kind::kModified, "d/e/b")}));
  CHECK(words(index.apply(batch({ev(Kind::kMovedFrom, "d", 3, true), ev(Kind::kMovedTo, "step_2", 3, true)}))) ==
        "-d/a +step_2/a<d/a");
  CHECK(state_of(index, "step_2/a") == "committed");
  CHECK(state_of(index, "step_2/e/b") == "writing");
  CHECK(state_of(index, "d/a") == "none");
  index.apply(batch({ev(Kind::kMovedFrom, "step_2", 4, true)}));
  CHECK(words(index.apply(batch({}))) == "-step_2/a");
  CHECK(index.entries().empty());
}

TEST_CASE("a scan: at the start every file is committed; after an overflow, changed files are judged again") {
  CommitIndex index;
  Batch start = batch({found("kept.pt", id_of(1)), found("d/old.pt", id_of(2))});
  start.complete_scan = true;
  CHECK(words(index.apply(start)) == "+d/old.pt +kept.pt");
  CHECK(state_of(index, "kept.pt") == "committed");

  struct Row {
    const char* what;
    FolderEvent file;
    bool ending;  // a worker was ending
    const char* state;
  };
  const std::vector<Row> rows = {
      {"unchanged since its commit, a worker ending meanwhile", found("kept.pt", id_of(1)), true, "committed"},
      {"changed, no worker ending, nobody writing it", found("kept.pt", id_of(1, 99)), false, "committed"},
      {"changed, a worker ending", found("kept.pt", id_of(1, 99)), true, "doubted"},
      {"changed, a live worker holds it open for writing", found("kept.pt", id_of(1, 99), true), false, "writing"},
      {"new, no worker ending", found("kept.pt", id_of(5)), false, "committed"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    CommitIndex i = index;
    Batch rescan = batch({row.file}, row.ending ? std::vector<int>{0} : std::vector<int>{});
    rescan.complete_scan = true;
    const auto changes = i.apply(rescan);
    CHECK(state_of(i, "kept.pt") == row.state);
    CHECK(state_of(i, "d/old.pt") == "none");  // not listed again: gone
    CHECK(words(changes).find("-d/old.pt") == 0);
  }
}

TEST_CASE("a round's end: what is not committed is taken out, with what is known of it") {
  CommitIndex index;
  index.apply(batch({ev(Kind::kCreated, "ckpt"), ev(Kind::kClosed, "ckpt"), ev(Kind::kCreated, "open"),
                     ev(Kind::kModified, "open"), ev(Kind::kCreated, "torn"), ev(Kind::kModified, "torn"),
                     ev(Kind::kCreated, "tmp"), ev(Kind::kClosed, "tmp")}));
  index.apply(batch({ev(Kind::kClosed, "torn"), ev(Kind::kMovedFrom, "tmp", 5)}, {0, 3}));
  std::vector<SnapshotChange> changes;
  const std::vector<Uncommitted> out = index.end_round(&changes);
  REQUIRE(out.size() == 2);
  CHECK(out[0].path == "open");
  CHECK_FALSE(out[0].closed);
  CHECK(out[1].path == "torn");
  CHECK(out[1].closed);
  CHECK(out[1].ranks == std::vector<int>{0, 3});
  CHECK(words(changes) == "-tmp");  // its rename never paired: moved out
  CHECK(state_of(index, "ckpt") == "committed");
  CHECK(index.end_round(nullptr).empty());

  CHECK(removed_line(out) ==
        "ddprun: snapshots: removed 2 files that may be half-written, so that no later round reads them: open (never "
        "closed), torn (closed as ranks 0, 3 ended)\n");
  CHECK(removed_line({{"ckpt.pt", true, {1}}}) ==
        "ddprun: snapshots: removed 1 file that may be half-written, so that no later round reads it: ckpt.pt "
        "(closed as rank 1 ended)\n");
  CHECK(removed_line({{"x", true, {}}}).find("x (closed as the round's processes were killed)") != std::string::npos);
  CHECK(removed_line({}).empty());
  std::vector<Uncommitted> many;
  for (int i = 0; i < 7; ++i) many.push_back({"f" + std::to_string(i), false, {}});
  CHECK(removed_line(many).find("f4 (never closed) and 2 more\n") != std::string::npos);
}
