// The agent store's protocol handling, fed the bytes PyTorch's TCPStore clients send: the
// sequences of torch 1.13 and 2.11 clients as captured on the wire, split at every byte, one
// store shared by both versions, and malformed input, which must close only that connection.
#include "store/agent_store.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <utility>

namespace ddprun::elastic {
namespace {

using ClientId = AgentStore::ClientId;

// The client's encoding: host byte order, as c10d's tcputil writes it.
template <class T>
std::string raw(T value) {
  std::string s(sizeof value, '\0');
  std::memcpy(s.data(), &value, sizeof value);
  return s;
}
std::string u8(int v) { return std::string(1, static_cast<char>(v)); }
std::string i64(std::int64_t v) { return raw(v); }
std::string str(const std::string& s) { return raw<std::uint64_t>(s.size()) + s; }
std::string keys(std::initializer_list<std::string> list) {
  std::string out = raw<std::uint64_t>(list.size());
  for (const auto& k : list) out += str(k);
  return out;
}
const std::string kOpen2 = u8(0) + raw<std::uint32_t>(0x3C85F7CE);  // a torch 2.x connection's VALIDATE

// Version 1 and version 2 query types.
enum V1 { kSet1 = 0, kCas1, kGet1, kAdd1, kCheck1, kWait1, kNumKeys1, kWatch1, kDelete1 };
enum V2 { kSet2 = 1, kCas2, kGet2, kAdd2, kCheck2, kWait2, kNumKeys2, kDelete2, kAppend2, kMultiGet2,
          kMultiSet2, kCancelWait2, kPing2, kQueuePush2, kQueuePop2, kQueueLen2, kListKeys2 };

class Harness {
 public:
  explicit Harness(std::initializer_list<ClientId> clients) {
    for (ClientId c : clients) store.connect(c);
  }
  // Feeds `bytes` from `client`; false when the store wants the connection closed.
  bool feed(ClientId client, const std::string& bytes) {
    std::vector<AgentStore::Send> out;
    const bool ok = store.receive(client, bytes, out, why);
    for (auto& s : out) inbox[s.client] += s.bytes;
    return ok;
  }
  // The same, one byte at a time.
  bool trickle(ClientId client, const std::string& bytes) {
    for (char c : bytes) {
      if (!feed(client, std::string(1, c))) return false;
    }
    return true;
  }
  std::string take(ClientId client) { return std::exchange(inbox[client], {}); }
  // Client 1's query, whole or (split) a byte at a time, and the reply it got.
  std::string ask(bool split, const std::string& query) {
    REQUIRE((split ? trickle(1, query) : feed(1, query)));
    return take(1);
  }

  AgentStore store;
  std::map<ClientId, std::string> inbox;
  std::string why;
};

TEST_CASE("a torch 1.13 client: each query and its reply, as captured from PyTorch's own server") {
  for (bool split : {false, true}) {
    CAPTURE(split);
    Harness h{1, 2};
    const auto ask = [&](const std::string& query) { return h.ask(split, query); };
    CHECK(ask(u8(kAdd1) + str("init/") + i64(1)) == i64(1));
    CHECK(h.store.version(1) == AgentStore::Version::k1);
    CHECK(ask(u8(kSet1) + str("/k") + str("v1")).empty());
    CHECK(ask(u8(kWait1) + keys({"/k"})) == u8(0));
    CHECK(ask(u8(kGet1) + str("/k")) == str("v1"));
    CHECK(ask(u8(kAdd1) + str("/c") + i64(5)) == i64(5));
    CHECK(ask(u8(kAdd1) + str("/c") + i64(-2)) == i64(3));
    CHECK(ask(u8(kCas1) + str("/k") + str("v1") + str("v2")) == str("v2"));
    CHECK(ask(u8(kCas1) + str("/k") + str("v1") + str("v3")) == str("v2"));  // not swapped
    CHECK(ask(u8(kCas1) + str("/nope") + str("x") + str("y")) == str("x"));  // missing: the expected value
    CHECK(ask(u8(kCas1) + str("/new") + str("") + str("z")) == str("z"));    // missing, none expected: created
    CHECK(ask(u8(kNumKeys1)) == i64(4));
    CHECK(ask(u8(kCheck1) + keys({"/new", "/zz"})) == u8(1));
    CHECK(ask(u8(kCheck1) + keys({"/new", "/k"})) == u8(0));
    // A wait for a missing key is answered when another client sets it.
    CHECK(ask(u8(kWait1) + keys({"/absent", "/k", "/later"})).empty());
    REQUIRE(h.feed(2, u8(kSet1) + str("/later") + str("1")));
    CHECK(h.take(1).empty());
    REQUIRE(h.feed(2, u8(kAdd1) + str("/absent") + i64(7)));
    CHECK(h.take(2) == i64(7));
    CHECK(h.take(1) == u8(0));
    CHECK(ask(u8(kDelete1) + str("/k")) == i64(1));
    CHECK(ask(u8(kDelete1) + str("/k")) == i64(0));
    CHECK(ask(u8(kGet1) + str("/k")).size() == 8);  // a missing key: an empty value
  }
}

TEST_CASE("a torch 1.13 callback connection: WATCH_KEY, then every change of the key") {
  Harness h{1, 2};
  REQUIRE(h.feed(2, u8(kWatch1) + str("/w")));
  CHECK(h.take(2) == u8(3));
  REQUIRE(h.feed(1, u8(kSet1) + str("/w") + str("1")));
  CHECK(h.take(2) == u8(1) + str("/w") + str("") + str("1"));  // created
  REQUIRE(h.feed(1, u8(kSet1) + str("/w") + str("2")));
  CHECK(h.take(2) == u8(0) + str("/w") + str("1") + str("2"));  // updated
  REQUIRE(h.feed(1, u8(kCas1) + str("/w") + str("2") + str("3")));
  CHECK(h.take(1) == str("3"));
  CHECK(h.take(2) == u8(0) + str("/w") + str("2") + str("3"));
  REQUIRE(h.feed(1, u8(kDelete1) + str("/w")));
  CHECK(h.take(2) == u8(2) + str("/w") + str("3") + str(""));  // deleted
  h.store.disconnect(2);
  REQUIRE(h.feed(1, u8(kSet1) + str("/w") + str("4")));
  CHECK(h.inbox[2].empty());
}

TEST_CASE("a torch 2.11 client: VALIDATE and PING first, then each query and its reply") {
  for (bool split : {false, true}) {
    CAPTURE(split);
    Harness h{1, 2};
    const auto ask = [&](const std::string& query) { return h.ask(split, query); };
    CHECK(ask(kOpen2).empty());
    CHECK(h.store.version(1) == AgentStore::Version::k2);
    CHECK(ask(u8(kPing2) + raw<std::uint32_t>(0x510c)) == raw<std::uint32_t>(0x510c));
    CHECK(ask(u8(kAdd2) + str("init/") + i64(1)) == i64(1));
    CHECK(ask(u8(kSet2) + str("/k") + str("v1")).empty());
    CHECK(ask(u8(kWait2) + keys({"/k"})) == u8(0));
    CHECK(ask(u8(kGet2) + str("/k")) == str("v1"));
    CHECK(ask(u8(kCas2) + str("/k") + str("v1") + str("v2")) == str("v2"));
    CHECK(ask(u8(kNumKeys2)) == i64(2));
    CHECK(ask(u8(kCheck2) + keys({"/k", "/zz"})) == u8(1));
    // A wait that times out on the client: it cancels, and nothing more comes.
    CHECK(ask(u8(kWait2) + keys({"/absent"})).empty());
    CHECK(ask(u8(kCancelWait2)) == u8(1));
    REQUIRE(h.feed(2, kOpen2 + u8(kSet2) + str("/absent") + str("")));
    CHECK(h.take(1).empty());
    CHECK(ask(u8(kAppend2) + str("/ap") + str("12")).empty());
    CHECK(ask(u8(kAppend2) + str("/ap") + str("34")).empty());
    CHECK(ask(u8(kGet2) + str("/ap")) == str("1234"));
    CHECK(ask(u8(kMultiSet2) + raw<std::uint64_t>(2) + str("/m1") + str("a") + str("/m2") + str("bb")).empty());
    CHECK(ask(u8(kMultiGet2) + keys({"/m1", "/m2"})) == str("a") + str("bb"));
    CHECK(ask(u8(kDelete2) + str("/ap")) == i64(1));
    CHECK(ask(u8(kListKeys2)) == i64(5) + str("/absent") + str("/k") + str("/m1") + str("/m2") + str("init/"));
    CHECK(ask(u8(kQueuePush2) + str("/q") + str("e1")).empty());
    CHECK(ask(u8(kQueueLen2) + str("/q")) == i64(1));
    CHECK(ask(u8(kWait2) + keys({"/q"})) == u8(0));  // a non-empty queue counts as present
    CHECK(ask(u8(kQueuePop2) + str("/q")) == i64(1) + str("e1"));
    CHECK(ask(u8(kQueuePop2) + str("/q")) == i64(0));
    CHECK(ask(u8(kQueueLen2) + str("/q")) == i64(0));
  }
}

TEST_CASE("a blocking queue_pop: a push wakes one waiter, not all") {
  Harness h{1, 2, 3};
  for (ClientId c : {1, 2, 3}) REQUIRE(h.feed(c, kOpen2));
  REQUIRE(h.feed(1, u8(kWait2) + keys({"/q"})));
  REQUIRE(h.feed(2, u8(kWait2) + keys({"/q"})));
  REQUIRE(h.feed(3, u8(kQueuePush2) + str("/q") + str("x")));
  CHECK(h.take(1) == u8(0));
  CHECK(h.take(2).empty());
  REQUIRE(h.feed(1, u8(kQueuePop2) + str("/q")));
  CHECK(h.take(1) == i64(1) + str("x"));
  REQUIRE(h.feed(3, u8(kQueuePush2) + str("/q") + str("y")));
  CHECK(h.take(2) == u8(0));
}

TEST_CASE("both versions share one store, and a client that goes away stops waiting") {
  Harness h{1, 2, 3};
  REQUIRE(h.feed(1, u8(kWait1) + keys({"/x"})));
  REQUIRE(h.feed(3, kOpen2 + u8(kWait2) + keys({"/x"})));
  h.store.disconnect(3);
  REQUIRE(h.feed(2, kOpen2 + u8(kSet2) + str("/x") + str("from 2.x")));
  CHECK(h.take(1) == u8(0));
  CHECK(h.inbox[3].empty());
  REQUIRE(h.feed(1, u8(kGet1) + str("/x")));
  CHECK(h.take(1) == str("from 2.x"));
  CHECK(h.store.key_count() == 1);
  h.store.clear();
  CHECK(h.store.key_count() == 0);
}

TEST_CASE("a wait that ends (cancelled, replaced, its client gone) leaves no waiter behind") {
  Harness h{1, 2, 3};
  for (ClientId c : {1, 2, 3}) REQUIRE(h.feed(c, kOpen2));
  // 1 waits for /a and /b; /a comes; 1 cancels: /b's waiters are 2's alone.
  REQUIRE(h.feed(1, u8(kWait2) + keys({"/a", "/b"})));
  REQUIRE(h.feed(2, u8(kWait2) + keys({"/b"})));
  REQUIRE(h.feed(3, u8(kSet2) + str("/a") + str("1")));
  CHECK(h.take(1).empty());
  REQUIRE(h.feed(1, u8(kCancelWait2)));
  CHECK(h.take(1) == u8(1));
  // 1 waits again, for /c only, and is woken by /c, not by /b.
  REQUIRE(h.feed(1, u8(kWait2) + keys({"/c"})));
  REQUIRE(h.feed(3, u8(kSet2) + str("/b") + str("1")));
  CHECK(h.take(2) == u8(0));
  CHECK(h.take(1).empty());
  REQUIRE(h.feed(3, u8(kSet2) + str("/c") + str("1")));
  CHECK(h.take(1) == u8(0));
  // A torch 1.x client's new WAIT replaces the one it gave up on; a client gone waits for nothing.
  REQUIRE(h.feed(2, u8(kWait2) + keys({"/d", "/e"})));
  h.store.disconnect(2);
  Harness v1{4, 5};
  REQUIRE(v1.feed(4, u8(kWait1) + keys({"/x"})));
  REQUIRE(v1.feed(4, u8(kWait1) + keys({"/y"})));
  REQUIRE(v1.feed(5, u8(kSet1) + str("/x") + str("1")));
  CHECK(v1.take(4).empty());
  REQUIRE(v1.feed(5, u8(kSet1) + str("/y") + str("1")));
  CHECK(v1.take(4) == u8(0));
  REQUIRE(h.feed(3, u8(kSet2) + str("/d") + str("1") + u8(kSet2) + str("/e") + str("1")));
  CHECK(h.inbox[2].empty());
}

TEST_CASE("malformed input is refused with a reason; the store goes on for the others") {
  struct Case {
    const char* name;
    std::string bytes;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"a query type 1.x does not have", u8(9) + str("/k"), "query type 9, which no torch 1.x client sends"},
      {"a query type 2.x does not have", kOpen2 + u8(18), "query type 18, which no torch 2.x client sends"},
      {"a second VALIDATE", kOpen2 + kOpen2, "a second VALIDATE"},
      {"a key longer than 1 MiB", u8(kGet1) + raw<std::uint64_t>((1 << 20) + 1), "a key of 1048577 bytes"},
      {"a value longer than 1 GiB", u8(kSet1) + str("/k") + raw<std::uint64_t>(1ull << 31), "a value of 2147483648"},
      {"a length with its top bit set", u8(kSet1) + str("/k") + raw<std::uint64_t>(~0ull), "a value of 18446744073709551615"},
      {"too many keys", u8(kWait1) + raw<std::uint64_t>(1 << 30), "1073741824 keys in one query"},
      {"VALIDATE with the wrong magic: a 1.x SET with a huge key", u8(0) + raw<std::uint64_t>(0x1234567890), "a key of"},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    Harness h{1, 2};
    CHECK_FALSE(h.feed(1, c.bytes));
    INFO(h.why);
    CHECK(h.why.find(c.why) != std::string::npos);
    h.store.disconnect(1);
    REQUIRE(h.feed(2, u8(kAdd1) + str("n") + i64(1)));
    CHECK(h.take(2) == i64(1));
  }
  Harness h{1};
  REQUIRE(h.feed(1, u8(kSet1) + str("/s") + str("not a number")));
  CHECK_FALSE(h.feed(1, u8(kAdd1) + str("/s") + i64(1)));
  CHECK(h.why == "ADD to key '/s', whose value is not an integer");
}

TEST_CASE("a query is not acted on until all of it has arrived") {
  Harness h{1, 2};
  const std::string set = u8(kSet1) + str("/k") + str("value");
  REQUIRE(h.feed(1, set.substr(0, set.size() - 1)));
  REQUIRE(h.feed(2, u8(kCheck1) + keys({"/k"})));
  CHECK(h.take(2) == u8(1));
  REQUIRE(h.feed(1, set.substr(set.size() - 1) + u8(kGet1) + str("/k")));
  CHECK(h.take(1) == str("value"));
}

}  // namespace
}  // namespace ddprun::elastic
