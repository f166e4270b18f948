// Snapshot replication between real replicators on loopback, in one process: each with a folder
// of its own, so that only the links carry a file from one to another.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fake_munge.hpp"
#include "replica/link.hpp"
#include "replica/replicator.hpp"
#include "replicator_testing.hpp"

using namespace ddprun::elastic;


TEST_CASE("replicable paths: relative, inside the folder, never the incoming folder") {
  CHECK(replicable_path("ckpt.pt"));
  CHECK(replicable_path("step_10/__0_0.distcp"));
  CHECK(replicable_path("step_10/.metadata"));
  CHECK_FALSE(replicable_path(""));
  CHECK_FALSE(replicable_path("/etc/passwd"));
  CHECK_FALSE(replicable_path("../x"));
  CHECK_FALSE(replicable_path("a/../../x"));
  CHECK_FALSE(replicable_path("a//b"));
  CHECK_FALSE(replicable_path("a/./b"));
  CHECK_FALSE(replicable_path("a/"));
  CHECK_FALSE(replicable_path(".ddprun-incoming/3"));
  CHECK(replicable_path("x/.ddprun-incoming"));
}

TEST_CASE("a commit reaches every node of the ring, at the same path, whole; a removal follows it") {
  Node a, b, c;
  start_round(0, {&a, &b, &c});
  const std::string big = random_bytes(300 * 1000 + 7, 1);  // many chunks of 4096
  a.write("ckpt.pt", big);
  b.write("step_10/__1_0.distcp", "shard of b");
  for (Node* n : {&a, &b, &c}) {
    REQUIRE(n->holds("ckpt.pt", a.replicator->node()));
    REQUIRE(n->holds("step_10/__1_0.distcp", b.replicator->node()));
    CHECK(n->read("ckpt.pt") == big);
    CHECK(n->read("step_10/__1_0.distcp") == "shard of b");
  }
  // Rewritten on c after it had a's: c's wins everywhere.
  c.write("ckpt.pt", "newer");
  for (Node* n : {&a, &b, &c}) {
    REQUIRE(n->holds("ckpt.pt", c.replicator->node()));
    CHECK(n->read("ckpt.pt") == "newer");
  }
  // Removed on b: gone everywhere.
  fs::remove(fs::path(b.folder.path) / "ckpt.pt");
  b.replicator->removed("ckpt.pt");
  for (Node* n : {&a, &b, &c}) {
    REQUIRE(n->holds("ckpt.pt", b.replicator->node(), true));
    CHECK_FALSE(n->has("ckpt.pt"));
  }
  // What a replicator put in place and the commit watcher then reports is not a new commit.
  const auto before = a.replicator->entries().at("step_10/__1_0.distcp").version;
  a.replicator->committed("step_10/__1_0.distcp");
  CHECK(a.replicator->entries().at("step_10/__1_0.distcp").version == before);
  // Nothing is left in the incoming folders.
  for (Node* n : {&a, &b, &c}) CHECK(fs::is_empty(fs::path(n->folder.path) / kIncomingFolder));
}

TEST_CASE("a node that replaces a lost one holds every file of the job before its workers start") {
  auto a = std::make_unique<Node>();
  Node b, c;
  start_round(0, {a.get(), &b, &c});
  a->write("rank0.pt", random_bytes(50000, 2));
  b.write("x/y/z.bin", "deep");
  REQUIRE(c.holds("rank0.pt", a->replicator->node()));
  REQUIRE(c.holds("x/y/z.bin", b.replicator->node()));
  const std::string rank0 = a->read("rank0.pt");
  a.reset();  // node a lost

  Node spare;  // empty: a hot spare, or a node that came back
  const auto outcomes = start_round(1, {&spare, &b, &c});
  // Fetched by its restore, or pushed by c, whose copy of b's file to a was cut by a's loss and
  // goes to its new successor: whole either way when the restore ends.
  CHECK(outcomes[0].fetched >= 1);
  CHECK(outcomes[0].lines.empty());
  CHECK(outcomes[1].fetched == 0);
  CHECK(spare.read("rank0.pt") == rank0);
  CHECK(spare.read("x/y/z.bin") == "deep");
  // And the ring goes on with the new member.
  spare.write("after.pt", "from the spare");
  REQUIRE(b.holds("after.pt", spare.replicator->node()));
  REQUIRE(c.holds("after.pt", spare.replicator->node()));
}

TEST_CASE("a copy cut by its sender's loss is never put in place, and the restore says it is lost") {
  Node b, c;
  // A predecessor that sends the start of a copy and goes: played by a link of the test.
  const ReplicaPeer ghost{"ffffffffffffffff-ghost", "127.0.0.1", 1};
  start_round(0, {&b, &c});
  b.write("ckpt.pt", "old whole version");
  REQUIRE(c.holds("ckpt.pt", b.replicator->node()));
  // Round 1: the ghost is b's predecessor.
  std::vector<ReplicaPeer> ring = {ghost, b.peer(), c.peer()};
  b.replicator->start_round(1, ring, [](RestoreOutcome) {});
  c.replicator->start_round(1, ring, [](RestoreOutcome) {});
  {
    ReplicaLink link = ReplicaLink::connect("127.0.0.1", b.replicator->port(), NodeAuth{"s3cret", nullptr},
                                            {{"type", "intro"}, {"purpose", "push"}, {"round", 1}, {"node", ghost.node}}, kWait);
    REQUIRE(link.receive(kWait).value("type", "") == "ready");
    link.send({{"type", "copy"}, {"path", "ckpt.pt"}, {"entry", ManifestEntry{Version{1000, ghost.node}, 10000, false}}});
    link.send_chunk(std::string(4096, 'x'));
    // b has seen the copy begin (and forwards it to c as it lands).
    REQUIRE(b.replicator->wait_until(
        [&](const ManifestEntries&, const std::map<std::string, Version>& announced) { return announced.count("ckpt.pt") == 1; },
        kWait));
  }  // the ghost's node goes
  // b forwarded what it had to c, which saw the copy begin too; nobody holds it whole.
  const auto outcomes = start_round(2, {&b, &c});
  CHECK(b.read("ckpt.pt") == "old whole version");
  CHECK(c.read("ckpt.pt") == "old whole version");
  REQUIRE(outcomes[0].lines.size() == 1);
  CHECK(outcomes[0].lines[0].find("ckpt.pt as written on ffffffffffffffff-ghost is lost") != std::string::npos);
  CHECK(outcomes[0].lines[0].find("keeps the version written on " + b.replicator->node()) != std::string::npos);
  for (Node* n : {&b, &c}) CHECK(fs::is_empty(fs::path(n->folder.path) / kIncomingFolder));
}

TEST_CASE("fenced: a peer without the secret, and a node not in the round, never put a file in a folder") {
  Node b, c;
  start_round(0, {&b, &c});
  // Without the secret: refused in the handshake, said.
  CHECK_THROWS_AS(ReplicaLink::connect("127.0.0.1", b.replicator->port(), NodeAuth{"wrong", nullptr},
                                       {{"type", "intro"}, {"purpose", "manifest"}, {"round", 0}, {"node", "x"}}, kWait),
                  LinkError);
  CHECK(b.lines.wait_for("refused a connection: 127.0.0.1:"));
  CHECK(b.lines.wait_for("did not finish the handshake (it ended at the challenge, as a node with another secret does)"));
  // With the secret, but not a member of the round (a lost node still sending): refused, said.
  {
    ReplicaLink link = ReplicaLink::connect("127.0.0.1", b.replicator->port(), NodeAuth{"s3cret", nullptr},
                                            {{"type", "intro"}, {"purpose", "push"}, {"round", 0}, {"node", "eeeeeeeeeeeeeeee-x"}}, kWait);
    CHECK(b.lines.wait_for("refused copies from eeeeeeeeeeeeeeee-x (round 0): not a member of round 0"));
    const nlohmann::json answer = link.receive(kWait);
    CHECK(answer.value("type", "") == "refused");
    CHECK(answer.value("why", "") == "not this node's predecessor in round 0");
    CHECK_THROWS_AS(link.receive(kWait), LinkError);  // closed by b
  }
  CHECK(b.replicator->entries().empty());
  // A replicator of another job (another secret) in the ring: its pushes fail the handshake.
  Node stranger("other");
  std::vector<ReplicaPeer> ring = {stranger.peer(), b.peer()};
  b.replicator->start_round(1, ring, [](RestoreOutcome) {});
  stranger.replicator->start_round(1, ring, [](RestoreOutcome) {});
  stranger.write("evil.pt", "x");
  CHECK(b.lines.wait_for("refused a connection"));
  CHECK_FALSE(b.has("evil.pt"));
}

TEST_CASE("make_snapshot_replication listens on every address of the node: reached at 127.0.0.1") {
  Folder fa;
  Node b;
  Lines said;
  auto a = make_snapshot_replication(fa.path, ReplicationAuth{"s3cret", "", ""}, 0, said.say());
  CHECK(a->node().size() == 16 + 1 + 8);
  CHECK(a->node().substr(0, 16) == folder_identity(fa.path));
  CHECK(a->node() != b.replicator->node());
  const std::vector<SnapshotPeer> ring = {{a->node(), "127.0.0.1", a->port()}, b.peer()};
  std::mutex mutex;
  std::condition_variable cv;
  int restored = 0;
  const auto done = [&](RestoreOutcome) {
    std::lock_guard<std::mutex> lock(mutex);
    ++restored;
    cv.notify_all();
  };
  a->start_round(0, ring, done);
  b.replicator->start_round(0, ring, done);
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(cv.wait_for(lock, std::chrono::duration<double>(kWait), [&] { return restored == 2; }));
  }
  b.write("from_b", "to a");
  std::ofstream(fa.path + "/from_a") << "to b";
  a->committed("from_a");
  REQUIRE(b.holds("from_a", a->node()));
  CHECK(b.read("from_a") == "to b");
}

TEST_CASE("nodes whose folder is one (one machine, no mount namespace of their own) copy nothing, and say so once") {
  Node a;
  const std::string dir = a.folder.path;
  Lines said;
  // A second replicator of the same folder: another ddprun of the job on this machine.
  auto b = make_snapshot_replication(dir, ReplicationAuth{"s3cret", "", ""}, 0, said.say());
  CHECK(b->node().substr(0, 16) == a.replicator->node().substr(0, 16));
  const std::vector<SnapshotPeer> ring = {a.peer(), {b->node(), "127.0.0.1", b->port()}};
  CHECK(shared_folder(ring) == a.replicator->node() + " and " + b->node());
  Folder other;
  CHECK(folder_identity(other.path) != folder_identity(dir));
  std::vector<RestoreOutcome> outcomes;
  for (int round = 0; round < 2; ++round) {
    a.replicator->start_round(round, ring, [&](RestoreOutcome o) { outcomes.push_back(std::move(o)); });
  }
  REQUIRE(outcomes.size() == 2);  // called at once
  REQUIRE(outcomes[0].lines.size() == 1);
  CHECK(outcomes[0].lines[0].find("not copied between the nodes of round 0") != std::string::npos);
  CHECK(outcomes[1].lines.empty());
  a.write("x", "y");
  CHECK(a.replicator->wait_sent(kWait));  // nothing to send to
}

TEST_CASE("a commit made before the next node began the round reaches it once it has: refused, then sent again") {
  Node a, b;
  const std::vector<ReplicaPeer> ring = {a.peer(), b.peer()};
  a.replicator->start_round(0, ring, [](RestoreOutcome) {});
  a.write("early.pt", "before b's round");
  // a's copy is refused by b, which is in no round yet, and tried again meanwhile; no line for it.
  std::mutex mutex;
  std::condition_variable cv;
  bool restored = false;
  b.replicator->start_round(0, ring, [&](RestoreOutcome) {
    std::lock_guard<std::mutex> lock(mutex);
    restored = true;
    cv.notify_all();
  });
  REQUIRE(b.holds("early.pt", a.replicator->node()));
  CHECK(b.read("early.pt") == "before b's round");
  CHECK(a.replicator->wait_sent(kWait));
  std::unique_lock<std::mutex> lock(mutex);
  CHECK(cv.wait_for(lock, std::chrono::duration<double>(kWait), [&] { return restored; }));
  for (const auto& line : b.lines.lines) CHECK(line.find("refused") == std::string::npos);
}

TEST_CASE("a commit whose file went before it was sent (a temporary name renamed) is cut, and the queue goes on") {
  Node a, b;
  start_round(0, {&a, &b});
  for (int i = 0; i < 20; ++i) {
    const std::string tmp = "ckpt.pt.tmp", final_name = "ckpt.pt";
    std::ofstream(a.folder.path + "/" + tmp) << "version " << i;
    a.replicator->committed(tmp);  // its close, seen before the rename
    fs::rename(a.folder.path + "/" + tmp, a.folder.path + "/" + final_name);
    a.replicator->removed(tmp);
    a.replicator->committed(final_name);
  }
  REQUIRE(a.replicator->wait_sent(kWait));
  REQUIRE(b.holds("ckpt.pt", a.replicator->node()));
  CHECK(b.read("ckpt.pt") == "version 19");
  CHECK_FALSE(b.has("ckpt.pt.tmp"));
  CHECK(fs::is_empty(fs::path(b.folder.path) / kIncomingFolder));
}

// Under MUNGE (SLURM's default) the links take their key from MUNGE's exchange, as the rendezvous
// does: the scope (the SLURM job id and the run id) and the uid must be the job's.
TEST_CASE("MUNGE-keyed links: a job's nodes copy; another job's, another uid's and a secret's links are refused") {
  constexpr char kScope[] = "SLURM job 42, run 42.0";
  const auto munged = std::make_shared<FakeMunge>();
  const auto munge = [](std::shared_ptr<CredentialService> service, const std::string& scope, uid_t uid) {
    return NodeAuth{"", std::make_shared<MungeKeyExchange>(std::move(service), scope, uid)};
  };
  Node a(munge(munged, kScope, 1000)), b(munge(munged, kScope, 1000));
  start_round(0, {&a, &b});
  const std::string bytes = random_bytes(10000, 7);  // three chunks and a part
  a.write("ckpt.pt", bytes);
  REQUIRE(b.holds("ckpt.pt", a.replicator->node()));
  CHECK(b.read("ckpt.pt") == bytes);
  const nlohmann::json intro = {{"type", "intro"}, {"purpose", "manifest"}, {"round", 0}, {"node", "x"}};
  SUBCASE("another job (another scope): its nodes' pushes are refused, none of its files lands") {
    Node stranger(munge(munged, "SLURM job 43, run 43.0", 1000));
    std::vector<ReplicaPeer> ring = {stranger.peer(), b.peer()};
    b.replicator->start_round(1, ring, [](RestoreOutcome) {});
    stranger.replicator->start_round(1, ring, [](RestoreOutcome) {});
    stranger.write("evil.pt", "x");
    CHECK(b.lines.wait_for("did not prove with MUNGE that it belongs to this job (SLURM job 42, run 42.0): its MUNGE "
                           "credential is not for this job and run"));
    CHECK_FALSE(b.has("evil.pt"));
    // Nor does a node of this job take another job's node for a peer.
    CHECK_THROWS_AS(ReplicaLink::connect("127.0.0.1", stranger.replicator->port(), munge(munged, kScope, 1000), intro,
                                         kWait),
                    LinkError);
  }
  SUBCASE("another uid: its credential names its own uid") {
    CHECK_THROWS_AS(
        ReplicaLink::connect("127.0.0.1", b.replicator->port(), munge(munged->as(2000), kScope, 1000), intro, kWait),
        LinkError);
    CHECK(b.lines.wait_for("MUNGE credential is of uid 2000, and this job runs as uid 1000"));
  }
  SUBCASE("a peer with a secret, where the job uses MUNGE; and MUNGE where the job uses a secret") {
    CHECK_THROWS_AS(ReplicaLink::connect("127.0.0.1", b.replicator->port(), NodeAuth{"s3cret", nullptr}, intro, kWait),
                    LinkError);
    CHECK(b.lines.wait_for("it authenticates with a secret, and this node with MUNGE"));
    Node with_secret;
    CHECK_THROWS_AS(
        ReplicaLink::connect("127.0.0.1", with_secret.replicator->port(), munge(munged, kScope, 1000), intro, kWait),
        LinkError);
    CHECK(with_secret.lines.wait_for("it authenticates with MUNGE, and this node with the job's secret"));
  }
  CHECK(b.replicator->entries().size() == 1);
}
