#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "replica/manifest.hpp"

using namespace ddprun::elastic;

namespace {

ManifestEntry file(std::uint64_t clock, const char* origin, std::uint64_t size = 10) {
  return ManifestEntry{Version{clock, origin}, size, false};
}
ManifestEntry tombstone(std::uint64_t clock, const char* origin) {
  return ManifestEntry{Version{clock, origin}, 0, true};
}

std::string describe(const RestorePlan& plan) {
  std::string out;
  for (const auto& f : plan.fetch) {
    out += "fetch " + f.path + "@" + std::to_string(f.entry.version.clock) + f.entry.version.origin +
           " from " + (f.from.empty() ? "self" : f.from) + "; ";
  }
  for (const auto& r : plan.remove) out += "remove " + r.path + "@" + std::to_string(r.entry.version.clock) + "; ";
  for (const auto& l : plan.lost) {
    out += "lost " + l.path + "@" + std::to_string(l.version.clock) + l.version.origin + " kept " +
           (l.kept.version.origin.empty() ? "nothing" : std::to_string(l.kept.version.clock) + l.kept.version.origin) + "; ";
  }
  return out;
}

}  // namespace

TEST_CASE("versions: a Lamport clock, then the origin; the same order on every node") {
  CHECK(Version{1, "b"} < Version{2, "a"});
  CHECK(Version{2, "a"} < Version{2, "b"});
  CHECK_FALSE(Version{2, "b"} < Version{2, "b"});
  CHECK(Version{3, "a"} == Version{3, "a"});
}

TEST_CASE("a node's commits and the copies it receives: the newest stamp wins, the clock moves past every stamp seen") {
  Manifest a("a");
  CHECK(a.commit("ckpt.pt", 5).version == Version{1, "a"});
  CHECK(a.commit("ckpt.pt", 6).version == Version{2, "a"});
  // A copy from b stamped before b had seen a's second commit: older, dropped; the clock moves on.
  CHECK_FALSE(a.receive("ckpt.pt", file(1, "b")));
  CHECK(a.find("ckpt.pt")->version == Version{2, "a"});
  // The same stamp again (a repeated copy): dropped.
  CHECK_FALSE(a.receive("ckpt.pt", file(2, "a")));
  // b wrote after seeing a's: newer, taken.
  CHECK(a.receive("ckpt.pt", file(3, "b", 7)));
  CHECK(a.find("ckpt.pt")->size == 7);
  // a's next commit is stamped past b's, so that it wins on every node.
  CHECK(a.commit("ckpt.pt", 8).version == Version{4, "a"});
  // A far-ahead clock from a copy of another path moves the clock too.
  CHECK(a.receive("other", file(10, "c")));
  CHECK(a.commit("mine", 1).version == Version{11, "a"});
  // A removal is a stamped tombstone: an older copy never brings the file back.
  CHECK(a.remove("ckpt.pt").removed);
  CHECK_FALSE(a.receive("ckpt.pt", file(4, "a")));
  CHECK(a.find("ckpt.pt")->removed);
  // A removal received: taken when newer.
  CHECK(a.receive("mine", tombstone(20, "b")));
  CHECK(a.find("mine")->removed);
  CHECK(a.clock() == 20);
}

TEST_CASE("the restore before a round's workers start, as a table") {
  struct Row {
    const char* what;
    ManifestEntries local;
    std::vector<PeerManifest> peers;
    std::map<std::string, Version> announced;
    const char* plan;
  };
  const std::vector<Row> rows = {
      {"in step: nothing to do", {{"c", file(2, "a")}}, {{"b", {{"c", file(2, "a")}}, {}}}, {}, ""},
      {"a hot spare, empty: every file of the job, from the first member that holds it",
       {},
       {{"b", {{"c", file(2, "a")}}, {}}, {"d", {{"c", file(2, "a")}, {"x/y", file(5, "d")}}, {}}},
       {},
       "fetch c@2a from b; fetch x/y@5d from d; "},
      {"an older version here: the newer one", {{"c", file(2, "a")}}, {{"b", {{"c", file(3, "b")}}, {}}}, {},
       "fetch c@3b from b; "},
      {"a newer version here: nothing (the others fetch it)", {{"c", file(4, "a")}}, {{"b", {{"c", file(3, "b")}}, {}}}, {}, ""},
      {"removed elsewhere later: removed here", {{"c", file(2, "a")}}, {{"b", {{"c", tombstone(3, "b")}}, {}}}, {},
       "remove c@3; "},
      {"removed elsewhere, never held here: the tombstone recorded", {}, {{"b", {{"c", tombstone(3, "b")}}, {}}}, {},
       "remove c@3; "},
      {"removed elsewhere before a newer copy: the copy", {}, {{"b", {{"c", tombstone(3, "b")}}, {}}, {"d", {{"c", file(4, "a")}}, {}}}, {},
       "fetch c@4a from d; "},
      {"a copy cut by the loss of its node, no whole copy anywhere: lost, nothing kept",
       {}, {{"b", {}, {{"c", Version{7, "z"}}}}}, {}, "lost c@7z kept nothing; "},
      {"cut here, an older version held whole elsewhere: that one, and the newer one said lost",
       {}, {{"b", {{"c", file(3, "z")}}, {}}}, {{"c", Version{7, "z"}}}, "fetch c@3z from b; lost c@7z kept 3z; "},
      {"cut here, the same version whole at another member: fetched, not lost",
       {}, {{"b", {{"c", file(7, "z")}}, {}}}, {{"c", Version{7, "z"}}}, "fetch c@7z from b; "},
      {"cut, but superseded by a newer commit: not lost",
       {{"c", file(9, "a")}}, {}, {{"c", Version{7, "z"}}}, ""},
      {"cut, the newest whole is a removal older than the cut copy: lost, nothing kept",
       {{"c", tombstone(5, "a")}}, {{"b", {}, {{"c", Version{7, "z"}}}}}, {}, "lost c@7z kept nothing; "},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    Manifest local("a");
    for (const auto& [path, entry] : row.local) local.receive(path, entry);
    CHECK(describe(plan_restore(local, row.peers, row.announced)) == row.plan);
  }
}

TEST_CASE("after the restore every member holds the same manifest") {
  // Three nodes that each committed and received some of each other's files, one cut copy.
  Manifest a("a"), b("b"), c("c");
  const ManifestEntry one = a.commit("one", 1);
  b.receive("one", one);
  const ManifestEntry two = b.commit("two", 2);
  const ManifestEntry gone = c.commit("gone", 3);
  a.receive("gone", gone);
  const ManifestEntry removal = a.remove("gone");
  std::vector<Manifest*> nodes = {&a, &b, &c};
  std::vector<PeerManifest> told;
  for (Manifest* node : nodes) told.push_back(PeerManifest{node->node(), node->entries(), {}});
  for (Manifest* node : nodes) {
    std::vector<PeerManifest> others;
    for (const PeerManifest& p : told) if (p.node != node->node()) others.push_back(p);
    const RestorePlan plan = plan_restore(*node, others, {});
    CHECK(plan.lost.empty());
    for (const auto& f : plan.fetch) CHECK(node->receive(f.path, f.entry));
    for (const auto& r : plan.remove) CHECK(node->receive(r.path, r.entry));
  }
  for (Manifest* node : nodes) {
    CAPTURE(node->node());
    REQUIRE(node->entries().size() == 3);
    CHECK(node->find("one")->version == one.version);
    CHECK(node->find("two")->version == two.version);
    CHECK(node->find("gone")->removed);
    CHECK(node->find("gone")->version == removal.version);
  }
}
