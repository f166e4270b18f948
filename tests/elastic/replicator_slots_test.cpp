// --snapshot_replicas=K with real replicators on loopback (replicator_testing.hpp): a file held by
// the K next nodes only, a group rank's folder restored on whichever node runs it after a loss;
// and a replicator that stops while a link is opening.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "replica/link.hpp"
#include "replicator_testing.hpp"

namespace {

// Waits until `n` holds `path` as a copy for `slot`.
bool held_for(Node& n, int slot, const std::string& path) {
  return n.replicator->wait_held(
      [&](const std::map<int, ManifestEntries>& held) {
        const auto it = held.find(slot);
        return it != held.end() && it->second.count(path) == 1 && !it->second.at(path).removed;
      },
      kWait);
}

bool holds_copy(const Node& n, const std::string& path) {
  for (const auto& [slot, entries] : n.replicator->held()) {
    if (entries.count(path) != 0) return true;
  }
  return false;
}

// Four nodes of K=1, each with a file of its own, every copy held.
struct Ring4 {
  std::unique_ptr<Node> a = std::make_unique<Node>("s3cret", 1), b = std::make_unique<Node>("s3cret", 1),
                        c = std::make_unique<Node>("s3cret", 1), d = std::make_unique<Node>("s3cret", 1);
  Ring4() {
    start_round(0, {a.get(), b.get(), c.get(), d.get()});
    const std::vector<Node*> nodes = {a.get(), b.get(), c.get(), d.get()};
    for (std::size_t i = 0; i < 4; ++i) nodes[i]->write(std::string(1, static_cast<char>('a' + i)) + ".pt", std::string(5000 + i, static_cast<char>('a' + i)));
    for (std::size_t i = 0; i < 4; ++i) {
      REQUIRE(held_for(*nodes[(i + 1) % 4], static_cast<int>(i), std::string(1, static_cast<char>('a' + i)) + ".pt"));
    }
    for (Node* n : nodes) REQUIRE(n->replicator->wait_sent(kWait));
  }
};

}  // namespace

TEST_CASE("K=1 in a ring of 4: a file reaches exactly its successor's hold, shown on its own node only") {
  Ring4 r;
  for (Node* n : {r.b.get(), r.c.get(), r.d.get()}) CHECK_FALSE(n->has("a.pt"));
  CHECK(r.a->read("a.pt") == std::string(5000, 'a'));
  CHECK(holds_copy(*r.b, "a.pt"));
  CHECK_FALSE(holds_copy(*r.c, "a.pt"));
  CHECK_FALSE(holds_copy(*r.d, "a.pt"));
  CHECK(r.b->replicator->entries().count("a.pt") == 0);
  // A removal follows the copy to its holder.
  fs::remove(fs::path(r.a->folder.path) / "a.pt");
  r.a->replicator->removed("a.pt");
  REQUIRE(r.b->replicator->wait_held(
      [](const std::map<int, ManifestEntries>& held) { return held.count(0) == 1 && held.at(0).count("a.pt") == 1 && held.at(0).at("a.pt").removed; },
      kWait));
  CHECK_FALSE(fs::exists(fs::path(r.b->folder.path) / kIncomingFolder / "held/0/a.pt"));
}

TEST_CASE("K=1: a node lost and replaced: the spare shows the lost node's files, the others their own") {
  Ring4 r;
  const std::string b_node = r.b->replicator->node();
  r.b.reset();  // lost
  Node spare("s3cret", 1);
  const auto outcomes = start_round(1, {r.a.get(), &spare, r.c.get(), r.d.get()});
  CHECK(spare.read("b.pt") == std::string(5001, 'b'));
  CHECK_FALSE(spare.has("a.pt"));
  CHECK_FALSE(spare.has("c.pt"));
  REQUIRE(outcomes[1].lines.size() == 1);
  CHECK(outcomes[1].lines[0].find("runs group rank 1 from round 1 on, node " + b_node + "'s before") != std::string::npos);
  for (std::size_t i : {0u, 2u, 3u}) CHECK(outcomes[i].lines.empty());
  CHECK(r.a->has("a.pt"));
  CHECK_FALSE(r.a->has("b.pt"));
  CHECK(r.c->has("c.pt"));
  CHECK_FALSE(r.c->has("b.pt"));
  // The spare's files are held by its successor, as any node's.
  spare.write("after.pt", "from the spare");
  REQUIRE(held_for(*r.c, 1, "after.pt"));
  CHECK_FALSE(r.c->has("after.pt"));
}

TEST_CASE("K=1: after a shrink, a survivor that runs another group rank shows that rank's files") {
  Ring4 r;
  r.b.reset();  // lost, not replaced: c runs rank 1, d rank 2, rank 3 is no more
  const auto outcomes = start_round(1, {r.a.get(), r.c.get(), r.d.get()});
  CHECK(r.c->read("b.pt") == std::string(5001, 'b'));
  CHECK_FALSE(r.c->has("c.pt"));
  CHECK(r.d->read("c.pt") == std::string(5002, 'c'));
  CHECK_FALSE(r.d->has("d.pt"));
  CHECK(r.a->read("a.pt") == std::string(5000, 'a'));
  CHECK_FALSE(r.a->has("d.pt"));
  // Rank 3's files (d's before) held by a, and by d since it left that rank: dropped, said.
  CHECK(r.a->lines.wait_for("dropped the 1 file held for group rank 3"));
  CHECK(r.d->lines.wait_for("dropped the 1 file held for group rank 3"));
  CHECK_FALSE(holds_copy(*r.a, "d.pt"));
  // Rank 1's files now held by rank 2's node (d), pushed there by c after its restore.
  REQUIRE(held_for(*r.d, 1, "b.pt"));
  (void)outcomes;
}

TEST_CASE("K=1: a rank whose node and holder both went: its files are lost, said, the job goes on") {
  Ring4 r;
  const std::string b_node = r.b->replicator->node();
  r.b.reset();
  r.c.reset();  // b's only holder
  Node s1("s3cret", 1), s2("s3cret", 1);
  const auto outcomes = start_round(1, {r.a.get(), &s1, &s2, r.d.get()});
  REQUIRE(outcomes[1].lines.size() == 1);
  CHECK(outcomes[1].lines[0].find("no node holds the files of group rank 1 (node " + b_node + " in the round before)") !=
        std::string::npos);
  CHECK_FALSE(s1.has("b.pt"));
  CHECK(s2.read("c.pt") == std::string(5002, 'c'));  // from d, c's holder
}

TEST_CASE("a replicator stopping while a peer's handshake hangs returns at once, not after its timeout") {
  // A peer that accepts connections and never answers: the restore's manifest fetch hangs in
  // its handshake; and a connection to the replicator that never says hello.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(silent, 8) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  auto a = std::make_unique<Node>();  // timeout 20 s
  a->replicator->start_round(0, {a->peer(), {"ffffffffffffffff-silent", "127.0.0.1", ntohs(addr.sin_port)}},
                             [](RestoreOutcome) {});
  const int in = ::accept(silent, nullptr, nullptr);  // the restore connected: it waits for the challenge
  REQUIRE(in >= 0);
  const int mute = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<std::uint16_t>(a->replicator->port()));
  REQUIRE(::connect(mute, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  const auto start = std::chrono::steady_clock::now();
  a.reset();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 5);
  ::close(in);
  ::close(mute);
  ::close(silent);
}
