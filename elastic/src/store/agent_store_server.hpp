// The agent store (ddprun/agent_store.hpp) on sockets: a server that PyTorch's TCPStore clients
// of torch 1.x and 2.x can use, on its own thread and its own asio::io_context, so that nothing
// the launcher's event loop waits for (a console write, a slow handler) delays the workers.
#pragma once

#include <array>
#include <asio.hpp>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "store/agent_store.hpp"

namespace ddprun::elastic {

class AgentStoreServer {
 public:
  // Listens on `bound_socket`, a socket of `protocol` already bound to the port, and owns it
  // from now on (closes it also when this throws). New connections are held, not served, until begin_round(). Throws std::system_error
  // when it cannot listen (another program listens on the port).
  // At most `max_connections` connections are kept, held and served together: at the limit a new
  // one closes the oldest that has sent nothing yet (PyTorch's clients speak at once; a flood of
  // idle connections does not), else the newest is closed. The store's protocol has no room
  // for authentication; this bounds what a peer that can reach the port can take.
  AgentStoreServer(asio::ip::tcp protocol, int bound_socket, std::size_t max_connections);
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

  void accept_next();
  // Closes one connection that has sent nothing (served, oldest first, then held); false if
  // every connection has spoken.
  bool make_room();
  void serve(asio::ip::tcp::socket socket);
  void read_next(const std::shared_ptr<Connection>& connection);
  void send(AgentStore::ClientId client, std::string bytes);
  void write_next(const std::shared_ptr<Connection>& connection);
  void close(AgentStore::ClientId client);

  // Declared first, destroyed last: the sockets below belong to it.
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  AgentStore store_;
  std::map<AgentStore::ClientId, std::shared_ptr<Connection>> connections_;
  std::vector<asio::ip::tcp::socket> held_;
  std::size_t max_connections_;
  bool limit_reported_ = false;
  std::array<char, 64 * 1024> buffer_{};  // what one read brings, handed to store_ at once
  AgentStore::ClientId next_client_ = 1;
  bool holding_ = true;
  std::thread thread_;
};

}  // namespace ddprun::elastic
