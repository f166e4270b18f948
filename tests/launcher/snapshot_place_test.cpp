#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "snapshots/snapshot_place.hpp"

using namespace ddprun::launcher;
using ddprun::size_words;  // base/text.hpp

TEST_CASE("the snapshot folder's name: the same for every start of a run id, one per user, safe as a name") {
  CHECK(snapshot_folder_name(0, "4242") == "ddprun-snapshots.0.4242");
  CHECK(snapshot_folder_name(1000, "4242") == "ddprun-snapshots.1000.4242");
  CHECK(snapshot_folder_name(1000, "job-1_a.b") == "ddprun-snapshots.1000.job-1_a.b");
  // Changed to be a name: the hash of the whole id follows, so that ids that read alike differ.
  const std::string slash = snapshot_folder_name(0, "a/b");
  const std::string under = snapshot_folder_name(0, "a_b");
  CHECK(slash.rfind("ddprun-snapshots.0.a_b-", 0) == 0);
  CHECK(slash.size() == under.size() + 9);
  CHECK(slash != under);
  CHECK(snapshot_folder_name(0, "a/b") == slash);  // the same at every start
  CHECK(snapshot_folder_name(0, "../..").find('/') == std::string::npos);
  CHECK(snapshot_folder_name(0, std::string(256, 'x')).size() < 100);
  CHECK(snapshot_folder_name(0, std::string(256, 'x')) != snapshot_folder_name(0, std::string(255, 'x')));
}

TEST_CASE("where the snapshot folder goes: /dev/shm when it is a writable tmpfs, else TMPDIR, else /tmp") {
  struct Row {
    SnapshotFacts facts;
    unsigned long long cap;
    const char* path;
    bool in_memory;
    bool mount;
  };
  const std::vector<Row> rows = {
      // TMPDIR does not move it off /dev/shm: a requeue's job may get another TMPDIR, and it must be memory.
      {{0, "", true, false}, 0, "/dev/shm/ddprun-snapshots.0.j", true, false},
      {{1000, "/scratch/t", true, false}, 0, "/dev/shm/ddprun-snapshots.1000.j", true, false},
      {{0, "", true, false}, 4ULL << 30, "/dev/shm/ddprun-snapshots.0.j", true, true},
      // No /dev/shm to write in: TMPDIR, else /tmp, in memory only where that is a tmpfs.
      {{1000, "/run/user/1000", false, true}, 0, "/run/user/1000/ddprun-snapshots.1000.j", true, false},
      {{1000, "/scratch/t", false, false}, 0, "/scratch/t/ddprun-snapshots.1000.j", false, false},
      {{1000, "", false, false}, 0, "/tmp/ddprun-snapshots.1000.j", false, false},
      {{0, "", false, false}, 1ULL << 20, "/tmp/ddprun-snapshots.0.j", false, true},  // root: its own tmpfs there
  };
  for (const Row& row : rows) {
    CAPTURE(row.path);
    const SnapshotPlace place = snapshot_place("j", row.cap, row.facts);
    CHECK(place.path == row.path);
    CHECK(place.in_memory == row.in_memory);
    CHECK(place.mount == row.mount);
  }
}

TEST_CASE("what is already at the path: made, reused when it is this user's alone, else refused in one line") {
  using Kind = FoundEntry::Kind;
  struct Row {
    FoundEntry found;
    FoundAction action;
    const char* says;  // part of the refusal's line
  };
  const std::vector<Row> rows = {
      {{Kind::kNone, 0, 0}, FoundAction::kMake, ""},
      {{Kind::kFolder, 1000, 0700}, FoundAction::kReuse, ""},  // a requeue's, or another node's of the job here
      {{Kind::kFolder, 1000, 0500}, FoundAction::kReuse, ""},
      {{Kind::kSymlink, 1000, 0777}, FoundAction::kRefuse, "is a symbolic link"},
      {{Kind::kOther, 1000, 0600}, FoundAction::kRefuse, "is not a folder"},
      {{Kind::kFolder, 1001, 0700}, FoundAction::kRefuse, "belongs to user 1001, not to user 1000"},
      {{Kind::kFolder, 0, 0700}, FoundAction::kRefuse, "belongs to user 0, not to user 1000"},
      {{Kind::kFolder, 1000, 0755}, FoundAction::kRefuse, "is open to other users (mode 0755, not 0700)"},
      {{Kind::kFolder, 1000, 0770}, FoundAction::kRefuse, "is open to other users (mode 0770, not 0700)"},
      {{Kind::kFolder, 1000, 01777}, FoundAction::kRefuse, "mode 1777"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.says);
    const FoundVerdict v = judge_found("/dev/shm/ddprun-snapshots.1000.j", row.found, 1000);
    CHECK(v.action == row.action);
    if (row.action == FoundAction::kRefuse) {
      CHECK(v.why.find(row.says) != std::string::npos);
      CHECK(v.why.rfind("snapshot folder /dev/shm/ddprun-snapshots.1000.j ", 0) == 0);
      CHECK(v.why.find("--snapshot=off") != std::string::npos);
      CHECK(v.why.find('\n') == std::string::npos);
    } else {
      CHECK(v.why.empty());
    }
  }
}

TEST_CASE("at the job's end: removed after a success or when empty, unless --snapshot_keep; the kept line") {
  struct Row {
    bool succeeded, keep;
    unsigned long long files;
    bool removed;
  };
  const std::vector<Row> rows = {
      {true, false, 3, true},   {true, false, 0, true},   // a success: nothing to resume
      {false, false, 3, false}, {false, false, 0, true},  // a failure: kept for a requeue, unless empty
      {true, true, 3, false},   {true, true, 0, false},   // --snapshot_keep: always kept
      {false, true, 3, false},  {false, true, 0, false},
  };
  for (const Row& row : rows) {
    CAPTURE(row.succeeded);
    CAPTURE(row.keep);
    CAPTURE(row.files);
    CHECK(removed_at_end(row.succeeded, row.keep, row.files) == row.removed);
  }
  CHECK(kept_line("/dev/shm/ddprun-snapshots.0.42", 2, 3ULL << 29, "42") ==
        "ddprun: snapshots kept in /dev/shm/ddprun-snapshots.0.42 (2 files, 1.5 GiB) for a rerun of job 42 on this "
        "node (the same --rdzv_id); rm -r it to free that memory\n");
  CHECK(holds_words(1, 3) == "1 file, 3 B");
  CHECK(holds_words(0, 0) == "0 files, 0 B");
  CHECK(kept_line("/tmp/x", 1, 1, "a\nb").find('\n') + 1 == kept_line("/tmp/x", 1, 1, "a\nb").size());
}

TEST_CASE("sizes as the user is told them") {
  CHECK(size_words(0) == "0 B");
  CHECK(size_words(1023) == "1023 B");
  CHECK(size_words(1536) == "1.5 KiB");
  CHECK(size_words(4ULL << 30) == "4.0 GiB");
  CHECK(size_words(3ULL << 40) == "3.0 TiB");
}
