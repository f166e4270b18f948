// One connection between two nodes' snapshot replicators (replicator.hpp), blocking, used by one
// thread at a time: the handshake of auth/rendezvous_auth.hpp with the job's secret, or with the
// key MUNGE's exchange hands out (auth/munge_auth.hpp: the hello and the challenge carry the
// credentials, as the rendezvous's do; the scope is the SLURM job id and the run id), then JSON
// lines sealed with the session's tags and chunks of file bytes encrypted with AES-256-GCM
// (ChunkCipher: a key of the session's for each direction), each announced by a sealed line that
// carries its size and its GCM tag:
//   client -> server  hello, proof (the handshake, plain lines; under MUNGE the hello has "munge")
//   server -> client  challenge (plain; under MUNGE with "munge")
//   client -> server  {"type":"intro","purpose":"push"|"manifest"|"fetch","round":R,"node":N}
//   then, by purpose (replicator.cpp):
//   push      server -> client  {"type":"ready"}, or {"type":"refused","why":W} and it closes (not
//                               the predecessor in its round: fenced, or that round not begun)
//             client -> server  {"type":"copy","path":P,"entry":E} and, for a file, its chunks:
//                               {"type":"chunk","n":BYTES,"tag":HEX} then BYTES encrypted, until
//                               E.size; then {"type":"end"}, or {"type":"cut"} when the copy is
//                               given up (its file changed while being sent, its source was cut):
//                               the receiver puts a copy in place only at its end
//             server -> client  {"type":"stored"} after each copy's end: the sender's copy is done
//   manifest  server -> client  {"type":"manifest","entries":{...},"announced":{...}}
//   fetch     client -> server  {"type":"fetch","path":P,"version":V}
//             server -> client  a copy as a push sends it, or {"type":"gone"}
// A line or a chunk whose tag fails, a hello of another version, and a peer silent past a
// deadline, end the connection (LinkError). The lines are authenticated, not encrypted (a
// stranger on the network sees the files' names, sizes and versions); the files' bytes are both.
#pragma once

#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "auth/munge_auth.hpp"
#include "auth/rendezvous_auth.hpp"

namespace ddprun::elastic {

class LinkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The address and port of a connected socket's peer ("127.0.0.3:40112", "[::1]:40112"); "a peer"
// when the socket has none.
std::string peer_address(int fd);

// The version named in the handshake of a replication link; a hello of another is refused. 2:
// chunks encrypted (1: MAC'd only).
inline constexpr int kReplicaProtocolVersion = 2;

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
  // Connects to addr:port, authenticates with `auth` (its MUNGE exchange when it has one, else its
  // secret; one of them it must have) and sends `intro` (sealed). Every step within `timeout`
  // seconds, or until `cancel` is cancelled. Throws LinkError.
  static ReplicaLink connect(const std::string& addr, int port, const NodeAuth& auth, const nlohmann::json& intro,
                             double timeout, LinkCanceller* cancel = nullptr);
  // Authenticates an accepted connection (owns `fd` from now on, closes it when this throws)
  // and reads the client's intro into `intro`. A peer that authenticates otherwise (a secret
  // where this node uses MUNGE, or MUNGE of another job or uid) is refused. Throws LinkError.
  static ReplicaLink accept(int fd, const NodeAuth& auth, double timeout, nlohmann::json& intro,
                            LinkCanceller* cancel = nullptr);

  ReplicaLink(ReplicaLink&& other) noexcept;
  ReplicaLink& operator=(ReplicaLink&& other) noexcept;
  ReplicaLink(const ReplicaLink&) = delete;
  ReplicaLink& operator=(const ReplicaLink&) = delete;
  ~ReplicaLink();

  void send(const nlohmann::json& message);
  // The next message; waits at most `timeout` seconds (< 0: until it comes or shutdown()).
  nlohmann::json receive(double timeout);
  // A chunk: its announcing line, then its bytes, encrypted.
  void send_chunk(std::string_view bytes);
  // The bytes of the next chunk, at most `max` of them, decrypted and their tag checked, into
  // `out`; true. When the
  // next message is not a chunk (a copy's "cut" in place of its bytes), it goes to `other` and
  // this returns false (without `other`: a LinkError).
  bool receive_chunk(std::string& out, std::size_t max, double timeout, nlohmann::json* other = nullptr);

  // Ends the connection so that a thread blocked in it returns (with a LinkError). Any thread.
  void shutdown();
  int fd() const { return fd_; }

 private:
  ReplicaLink(int fd, AuthRole role, const std::string& session_key);
  void key(AuthRole role, const std::string& session_key);  // the handshake's session key
  std::string read_line(double timeout);
  void read_exact(char* data, std::size_t size, double timeout);
  void write_all(std::string_view a, std::string_view b = {});

  int fd_ = -1;
  MessageAuth auth_;
  ChunkCipher send_cipher_;
  ChunkCipher receive_cipher_;
  std::string sealed_;  // the chunk being sent, encrypted
  std::string buffer_;  // bytes read past the last line
};

}  // namespace ddprun::elastic
