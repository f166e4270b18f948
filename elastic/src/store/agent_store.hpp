// The agent store: the key-value store PyTorch's workers use at MASTER_ADDR:MASTER_PORT when
// TORCHELASTIC_USE_AGENT_STORE=True, as a c10d TCPStore server would serve it, without I/O.
// Bytes from a client in; the bytes to send back (to it, or to other clients whose wait
// completes or whose watched key changed) out. AgentStoreServer (agent_store_server.hpp) puts
// it on sockets.
//
// Two generations of c10d's TCPStore client speak to it, told apart by each connection's first
// bytes:
//   version 1 (torch 1.x): queries SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5 GETNUMKEYS=6
//     WATCH_KEY=7 DELETE_KEY=8. Each client also opens a second, "callback" connection that
//     sends only WATCH_KEY and then receives the watched keys' changes.
//   version 2 (torch 2.x): every connection opens with VALIDATE=0 and the 32-bit magic number
//     0x3C85F7CE; then SET=1 COMPARE_SET=2 GET=3 ADD=4 CHECK=5 WAIT=6 GETNUMKEYS=7
//     DELETE_KEY=8 APPEND=9 MULTI_GET=10 MULTI_SET=11 CANCEL_WAIT=12 PING=13 QUEUE_PUSH=14
//     QUEUE_POP=15 QUEUE_LEN=16 LIST_KEYS=17.
// A version 1 connection whose first query is a SET starts with 0 too, followed by the key's
// 64-bit length: that length would have to be the magic number, far beyond kMaxKeyBytes.
//
// Encoding (c10d's tcputil, in the host's byte order, as both ends are the same kind of
// machine): the query type in one byte; a key or value as a uint64 length and its bytes;
// numbers as int64; key counts as uint64. Replies: GET, COMPARE_SET, each of MULTI_GET a value;
// ADD, GETNUMKEYS, DELETE_KEY (keys deleted), QUEUE_LEN an int64; CHECK one byte (0 ready,
// 1 not ready); WAIT one byte 0 when every key exists (at once, or later when the last one is
// set); CANCEL_WAIT one byte 1; PING its uint32 back; QUEUE_POP the queue's length and, when
// it was not empty, its first value; LIST_KEYS a count and the keys; WATCH_KEY one byte 3,
// then per change of the key its kind (0 updated, 1 created, 2 deleted), the key, the old and
// the new value. SET, APPEND, MULTI_SET and QUEUE_PUSH have no reply.
//
// Where PyTorch's two server implementations differ, this store does what the one torch 2.x
// uses by default does (libuv): GET of a missing key answers an empty value; a key created by
// COMPARE_SET wakes its waiters; a WAIT or CHECK counts a non-empty queue as an existing key.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ddprun::elastic {

class AgentStore {
 public:
  using ClientId = std::uint64_t;

  // Beyond these limits a query is malformed and its connection is closed.
  static constexpr std::uint64_t kMaxKeyBytes = 1 << 20;            // one key (keys are names)
  static constexpr std::uint64_t kMaxMessageBytes = 1ull << 30;     // one query with its values
  static constexpr std::uint64_t kMaxKeysPerQuery = 1 << 20;        // CHECK, WAIT, MULTI_*

  enum class Version { kUnknown, k1, k2 };  // kUnknown: nothing decisive received yet

  struct Send {
    ClientId client;
    std::string bytes;
  };

  // A new connection.
  void connect(ClientId client);
  // `bytes` arrived from `client`: answers every complete query in them, in order, and keeps
  // a partial one until the rest arrives. Appends what to send to `out`. Returns false, with
  // the reason in `why`, when the bytes are no query of the connection's protocol, or exceed
  // a limit: the connection must then be closed (and disconnect() called).
  bool receive(ClientId client, std::string_view bytes, std::vector<Send>& out, std::string& why);
  // The connection closed: its waits and watches end.
  void disconnect(ClientId client);
  // Forgets every key and queue. Call with no client connected.
  void clear();

  std::size_t key_count() const { return keys_.size(); }
  Version version(ClientId client) const;

 private:
  enum class Parse { kDone, kIncomplete, kMalformed };
  struct Client {
    Version version = Version::kUnknown;
    std::string pending;           // bytes of a query not complete yet
    std::size_t keys_awaited = 0;  // keys of its WAIT still missing; 0: not waiting
    std::vector<std::string> awaiting;  // the keys of its WAIT that were missing (when it waits)
  };

  Parse handshake(Client& client, std::string_view data, std::size_t& used);
  Parse handle_query(ClientId id, Client& client, std::string_view data, std::size_t& used,
                     std::vector<Send>& out, std::string& why);
  bool exists(const std::string& key) const;
  void store(const std::string& key, std::string value, std::vector<Send>& out);
  void wake_waiters(const std::string& key, std::vector<Send>& out);
  void wake_one_waiter(const std::string& key, std::vector<Send>& out);
  void notify_watchers(const std::string& key, std::uint8_t kind, const std::string& old_value,
                       const std::string& new_value, std::vector<Send>& out);
  void end_wait(ClientId id, Client& client);

  std::unordered_map<ClientId, Client> clients_;
  std::map<std::string, std::string> keys_;
  std::map<std::string, std::deque<std::string>> queues_;
  std::map<std::string, std::vector<ClientId>> waiters_;  // key -> clients waiting for it
  std::map<std::string, std::set<ClientId>> watchers_;    // key -> version 1 callback connections
};

}  // namespace ddprun::elastic
