// The agent store (ddprun/agent_store.hpp) on sockets: a server that PyTorch's TCPStore clients
// of torch 1.x and 2.x can use, on its own thread and its own asio::io_context, so that nothing
// the launcher's event loop waits for (a console write, a slow handler) delays the workers.
#pragma once

#include <array>
#include <asio.hpp>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "store/agent_store.hpp"

namespace ddprun::elastic {

class AgentStoreServer {
 public:
  // Seconds a connection may stay silent and still never be closed to make room. Real clients
  // speak within milliseconds; this leaves room for a machine so loaded that they take seconds.
  static constexpr double kSilentGrace = 5;

  // Listens on `bound_socket`, a socket of `protocol` already bound to the port, and owns it
  // from now on (closes it also when this throws). New connections are held, not served, until begin_round(). Throws std::system_error
  // when it cannot listen (another program listens on the port).
  // At most `max_connections` connections are kept, held and served together. At the limit,
  // the next connection is accepted only when one closes, or when the connection silent longest
  // has sent nothing for `silent_grace` seconds: that one is closed to make room
  // (store_room.hpp; until then the newcomer waits in the listen backlog). The store's protocol
  // has no room for authentication; this bounds what a peer that can reach the port can take,
  // without ever closing a worker that connected a moment before a flood of idle connections.
  AgentStoreServer(asio::ip::tcp protocol, int bound_socket, std::size_t max_connections,
                   double silent_grace = kSilentGrace);
  ~AgentStoreServer();
  AgentStoreServer(const AgentStoreServer&) = delete;
  AgentStoreServer& operator=(const AgentStoreServer&) = delete;

  // From when this returns, new connections are held, not served: they belong to the next
  // round. Connections already served go on (workers of other nodes may still use the store).
  void hold_new_connections();
  // Closes every connection served so far and forgets every key; then, when `serve`, serves
  // the held connections and new ones, else keeps holding (and closes the held ones).
  // Returns at once; what comes after it on the store's thread comes after it.
  void reset(bool serve);

 private:
  struct Connection;

  // Waits until the listening socket has a connection to accept (once: a second call while
  // waiting does nothing).
  void accept_next();
  void accept_ready();
  // Applies store_room(): true when the next connection may be accepted now; false when it
  // must wait (room_timer_ or a closing connection calls accept_next() again).
  bool room_for_one();
  void serve(Connection& connection);
  // Waits until a served connection is readable or writable (poller_: one wait for all).
  void poll_next();
  void poll_ready();
  void read_from(Connection& connection);
  // Queues `bytes` for `client` (in touched_ if its outbox was empty); flush() writes what is queued.
  void queue(AgentStore::ClientId client, std::string bytes);
  void flush(AgentStore::ClientId client);
  // Sets what poller_ watches the connection for: room to write while replies are queued, and
  // queries unless more than kOutboxLimit bytes of replies are.
  void watch(Connection& connection);
  void close(AgentStore::ClientId client);

  // Declared first, destroyed last: the timers and descriptors below belong to it.
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  // An epoll set of every served connection, level-triggered, read by poll_ready() on one wait
  // of io_: asio's own wait re-arms its descriptor with a system call at every wait, here
  // once for all the connections ready at that moment rather than once per query.
  asio::posix::stream_descriptor poller_;
  asio::steady_timer retry_timer_;
  asio::steady_timer room_timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  AgentStore store_;
  // Held and served (ids grow in the order they were accepted).
  std::unordered_map<AgentStore::ClientId, std::unique_ptr<Connection>> connections_;
  std::set<AgentStore::ClientId> silent_;  // those that have sent nothing yet, oldest first
  std::size_t max_connections_;
  double silent_grace_;
  bool waiting_to_accept_ = false;
  bool limit_reported_ = false;
  std::array<char, 64 * 1024> buffer_{};  // what one read brings, handed to store_ at once
  std::vector<AgentStore::Send> sends_;     // the replies to one read (kept for their capacity)
  std::vector<AgentStore::ClientId> touched_;  // the connections they go to
  AgentStore::ClientId next_client_ = 1;
  bool holding_ = true;
  std::thread thread_;
};

}  // namespace ddprun::elastic
