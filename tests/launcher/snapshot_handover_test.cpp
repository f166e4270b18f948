#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "snapshots/snapshot_handover.hpp"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

// Records what it is told, as "committed x", "removed y", "missing z".
struct Recording : ddprun::elastic::SnapshotReplication {
  std::vector<std::string> told;
  std::string id = "r";
  const std::string& node() const override { return id; }
  int port() const override { return 0; }
  void start_round(int, std::vector<ddprun::elastic::SnapshotPeer>,
                   std::function<void(ddprun::elastic::RestoreOutcome)>) override {}
  void committed(const std::string& path) override { told.push_back("committed " + path); }
  void removed(const std::string& path) override { told.push_back("removed " + path); }
  void missing(const std::string& path) override { told.push_back("missing " + path); }
};

SnapshotChange committed(const std::string& path, const std::string& from = "") {
  SnapshotChange c;
  c.kind = SnapshotChange::Kind::kCommitted;
  c.path = path;
  c.from = from;
  return c;
}
SnapshotChange removed(const std::string& path) {
  SnapshotChange c;
  c.kind = SnapshotChange::Kind::kRemoved;
  c.path = path;
  return c;
}

}  // namespace

TEST_CASE("what the commit watch saw, handed to the replication, as a table") {
  char name[] = "/tmp/handover_test.XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  const std::string folder = name;
  std::ofstream(folder + "/still_here") << "being written again";
  struct Row {
    const char* what;
    std::vector<SnapshotChange> changes;
    std::vector<std::string> told;
  };
  const std::vector<Row> rows = {
      {"a commit is copied", {committed("ckpt.pt")}, {"committed ckpt.pt"}},
      {"a commit by rename also removes the temporary name",
       {committed("ckpt.pt", "ckpt.pt.tmp")},
       {"removed ckpt.pt.tmp", "committed ckpt.pt"}},
      {"a temporary file closed, then renamed in the same batch: copied once, under its final name",
       {committed("ckpt.pt.tmp"), committed("ckpt.pt", "ckpt.pt.tmp")},
       {"removed ckpt.pt.tmp", "committed ckpt.pt"}},
      {"a file closed, written again under its name, then renamed: each commit copied",
       {committed("a.tmp"), removed("a.tmp"), committed("a.tmp"), committed("a", "a.tmp")},
       {"committed a.tmp", "removed a.tmp", "removed a.tmp", "committed a"}},
      {"a removal of a file gone from the folder is copied", {removed("old.pt")}, {"removed old.pt"}},
      {"a committed file written again: the others keep their copy until the new commit",
       {removed("still_here"), committed("still_here")},
       {"committed still_here"}},
      {"in order", {committed("a"), removed("b"), committed("c", "c.tmp")},
       {"committed a", "removed b", "removed c.tmp", "committed c"}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    Recording r;
    hand_over(row.changes, folder, r);
    CHECK(r.told == row.told);
  }
  fs::remove_all(folder);
}

TEST_CASE("files a round's end swept are fetched back from the other nodes, never removed there") {
  Recording r;
  hand_over_swept({Uncommitted{"ckpt.pt", true, {1}}, Uncommitted{"x/y", false, {}}}, r);
  CHECK(r.told == std::vector<std::string>{"missing ckpt.pt", "missing x/y"});
}
