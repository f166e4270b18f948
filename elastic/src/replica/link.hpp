// One connection between two nodes' snapshot replicators (replicator.hpp), blocking, used by one
// thread at a time: the handshake of auth/rendezvous_auth.hpp with the job's secret, then JSON
// lines sealed with the session's tags and chunks of file bytes, each announced by a sealed line
// that carries its size and its MAC:
//   client -> server  hello, proof (the handshake, plain lines)
//   server -> client  challenge (plain)
//   client -> server  {"type":"intro","purpose":"push"|"manifest"|"fetch","round":R,"node":N}
//   then, by purpose (replicator.cpp):
//   push      server -> client  {"type":"ready"}, or {"type":"refused","why":W} and it closes (not
//                               the predecessor in its round: fenced, or that round not begun)
//             client -> server  {"type":"copy","path":P,"entry":E} and, for a file, its chunks:
//                               {"type":"chunk","n":BYTES,"mac":HEX} then BYTES raw bytes, until
//                               E.size; then {"type":"end"}, or {"type":"cut"} when the copy is
//                               given up (its file changed while being sent, its source was cut):
//                               the receiver puts a copy in place only at its end
//             server -> client  {"type":"stored"} after each copy's end: the sender's copy is done
//   manifest  server -> client  {"type":"manifest","entries":{...},"announced":{...}}
//   fetch     client -> server  {"type":"fetch","path":P,"version":V}
//             server -> client  a copy as a push sends it, or {"type":"gone"}
// A line, a chunk or a MAC that fails, and a peer silent past a deadline, end the connection
// (LinkError). Messages and bytes are authenticated, not encrypted.
#pragma once

#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "auth/rendezvous_auth.hpp"

namespace ddprun::elastic {

class LinkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The address and port of a connected socket's peer ("127.0.0.3:40112", "[::1]:40112"); "a peer"
// when the socket has none.
std::string peer_address(int fd);

// The version named in the handshake of a replication link.
inline constexpr int kReplicaProtocolVersion = 1;

// Lets another thread cut a connection while it is being opened (its handshake, its connect):
// the replicator stopping must not wait out a silent peer's timeout. connect() and accept()
// register their socket with it until they return; cancel() shuts that socket down, and makes any
// later registration fail.
class LinkCanceller {
 public:
  void cancel();
  // Whether the socket may go on: false once cancelled.
  bool set(int fd);
  void clear();  // before the socket is closed: its number may be reused at once

 private:
  std::mutex mutex_;
  int fd_ = -1;
  bool cancelled_ = false;
};

class ReplicaLink {
 public:
  // Connects to addr:port, authenticates with `secret` and sends `intro` (sealed). Every step
  // within `timeout` seconds, or until `cancel` is cancelled. Throws LinkError.
  static ReplicaLink connect(const std::string& addr, int port, const std::string& secret,
                             const nlohmann::json& intro, double timeout, LinkCanceller* cancel = nullptr);
  // Authenticates an accepted connection (owns `fd` from now on, closes it when this throws)
  // and reads the client's intro into `intro`. Throws LinkError.
  static ReplicaLink accept(int fd, const std::string& secret, double timeout, nlohmann::json& intro,
                            LinkCanceller* cancel = nullptr);

  ReplicaLink(ReplicaLink&& other) noexcept;
  ReplicaLink& operator=(ReplicaLink&& other) noexcept;
  ReplicaLink(const ReplicaLink&) = delete;
  ReplicaLink& operator=(const ReplicaLink&) = delete;
  ~ReplicaLink();

  void send(const nlohmann::json& message);
  // The next message; waits at most `timeout` seconds (< 0: until it comes or shutdown()).
  nlohmann::json receive(double timeout);
  // A chunk: its announcing line, then its bytes.
  void send_chunk(std::string_view bytes);
  // The bytes of the next chunk, at most `max` of them, MAC checked, into `out`; true. When the
  // next message is not a chunk (a copy's "cut" in place of its bytes), it goes to `other` and
  // this returns false (without `other`: a LinkError).
  bool receive_chunk(std::string& out, std::size_t max, double timeout, nlohmann::json* other = nullptr);

  // Ends the connection so that a thread blocked in it returns (with a LinkError). Any thread.
  void shutdown();
  int fd() const { return fd_; }

 private:
  ReplicaLink(int fd, AuthRole role, const std::string& session_key);
  std::string read_line(double timeout);
  void read_exact(char* data, std::size_t size, double timeout);
  void write_all(std::string_view a, std::string_view b = {});

  int fd_ = -1;
  MessageAuth auth_;
  std::string chunk_key_;
  std::string buffer_;  // bytes read past the last line
};

}  // namespace ddprun::elastic
