#include "replica/link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace ddprun::elastic {

namespace {

// Lines are short (a manifest is the longest: a line per file); more is a peer to refuse.
constexpr std::size_t kMaxLine = 64u << 20;

using Clock = std::chrono::steady_clock;

// The time left until `deadline` in poll()'s milliseconds; -1: no deadline.
int left_ms(Clock::time_point deadline, bool has_deadline) {
  if (!has_deadline) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

Clock::time_point deadline_of(double timeout) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
}

void wait_for(int fd, short events, Clock::time_point deadline, bool has_deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, left_ms(deadline, has_deadline));
    if (n > 0) return;
    if (n == 0) throw LinkError(fmt::format("the peer was silent too long ({})", what));
    if (errno != EINTR) throw LinkError(fmt::format("poll: {}", std::strerror(errno)));
  }
}

std::string session_from_handshake(Handshake& handshake) { return handshake.session_key(); }

// What a peer failed to prove, for a refusal's line.
std::string proof_words(const NodeAuth& auth) {
  return auth.munge ? fmt::format("with MUNGE that it belongs to this job ({})", auth.munge->scope())
                    : std::string("it knows the job's secret (DDPRUN_RDZV_SECRET)");
}

constexpr std::string_view kClientToServer = "client->server";
constexpr std::string_view kServerToClient = "server->client";

// Clears a LinkCanceller when it goes: declared after the socket's owner, it goes first.
struct Registered {
  LinkCanceller* cancel = nullptr;
  ~Registered() {
    if (cancel != nullptr) cancel->clear();
  }
};

}  // namespace

void LinkCanceller::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool LinkCanceller::set(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_) return false;
  fd_ = fd;
  return true;
}

void LinkCanceller::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = -1;
}

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "a peer";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      ::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof text);
      return fmt::format("{}:{}", text, ntohs(in6->sin6_port));
    }
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(in6->sin6_port));
  }
  return "a peer";
}

ReplicaLink::ReplicaLink(int fd, AuthRole role, const std::string& session_key)
    : fd_(fd),
      auth_(role, session_key),
      send_cipher_(session_key, role == AuthRole::kClient ? kClientToServer : kServerToClient),
      receive_cipher_(session_key, role == AuthRole::kClient ? kServerToClient : kClientToServer) {}

void ReplicaLink::key(AuthRole role, const std::string& session_key) {
  auth_ = MessageAuth(role, session_key);
  send_cipher_ = ChunkCipher(session_key, role == AuthRole::kClient ? kClientToServer : kServerToClient);
  receive_cipher_ = ChunkCipher(session_key, role == AuthRole::kClient ? kServerToClient : kClientToServer);
}

ReplicaLink::ReplicaLink(ReplicaLink&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      auth_(std::move(other.auth_)),
      send_cipher_(std::move(other.send_cipher_)),
      receive_cipher_(std::move(other.receive_cipher_)),
      sealed_(std::move(other.sealed_)),
      buffer_(std::move(other.buffer_)) {}

ReplicaLink& ReplicaLink::operator=(ReplicaLink&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    auth_ = std::move(other.auth_);
    send_cipher_ = std::move(other.send_cipher_);
    receive_cipher_ = std::move(other.receive_cipher_);
    sealed_ = std::move(other.sealed_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

ReplicaLink::~ReplicaLink() {
  if (fd_ >= 0) ::close(fd_);
}

void ReplicaLink::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void ReplicaLink::write_all(std::string_view a, std::string_view b) {
  for (std::string_view part : {a, b}) {
    while (!part.empty()) {
      const ssize_t n = ::send(fd_, part.data(), part.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw LinkError(fmt::format("send: {}", std::strerror(errno)));
      }
      part.remove_prefix(static_cast<std::size_t>(n));
    }
  }
}

void ReplicaLink::read_exact(char* data, std::size_t size, double timeout) {
  const bool has_deadline = timeout >= 0;
  const auto deadline = deadline_of(has_deadline ? timeout : 0);
  const std::size_t buffered = std::min(size, buffer_.size());
  std::memcpy(data, buffer_.data(), buffered);
  buffer_.erase(0, buffered);
  std::size_t got = buffered;
  while (got < size) {
    wait_for(fd_, POLLIN, deadline, has_deadline, "in the middle of a chunk");
    const ssize_t n = ::recv(fd_, data + got, size - got, 0);
    if (n == 0) throw LinkError("the peer closed the connection in the middle of a chunk");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw LinkError(fmt::format("recv: {}", std::strerror(errno)));
    }
    got += static_cast<std::size_t>(n);
  }
}

std::string ReplicaLink::read_line(double timeout) {
  const bool has_deadline = timeout >= 0;
  const auto deadline = deadline_of(has_deadline ? timeout : 0);
  std::size_t scanned = 0;
  for (;;) {
    const auto newline = buffer_.find('\n', scanned);
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    scanned = buffer_.size();
    if (buffer_.size() > kMaxLine) throw LinkError("a line longer than any the protocol sends");
    wait_for(fd_, POLLIN, deadline, has_deadline, "waiting for a message");
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n == 0) throw LinkError("the peer closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw LinkError(fmt::format("recv: {}", std::strerror(errno)));
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void ReplicaLink::send(const nlohmann::json& message) {
  const std::string sealed = auth_.seal(message.dump());
  write_all(sealed, "\n");
}

nlohmann::json ReplicaLink::receive(double timeout) {
  const std::string line = read_line(timeout);
  try {
    return nlohmann::json::parse(auth_.open(line));
  } catch (const AuthError& e) {
    throw LinkError(e.what());
  } catch (const nlohmann::json::exception&) {
    throw LinkError("an unreadable message");
  }
}

void ReplicaLink::send_chunk(std::string_view bytes) {
  sealed_.assign(bytes);
  const std::string tag = send_cipher_.seal(sealed_);
  send({{"type", "chunk"}, {"n", bytes.size()}, {"tag", tag}});
  write_all(sealed_);
}

bool ReplicaLink::receive_chunk(std::string& out, std::size_t max, double timeout, nlohmann::json* other) {
  nlohmann::json header = receive(timeout);
  if (header.value("type", "") != "chunk") {
    if (other == nullptr) throw LinkError("expected a chunk");
    *other = std::move(header);
    return false;
  }
  if (!header.value("n", nlohmann::json()).is_number_unsigned() || !header.value("tag", nlohmann::json()).is_string()) {
    throw LinkError("a chunk announced without its size or tag");
  }
  const auto n = header["n"].get<std::size_t>();
  if (n == 0 || n > max) throw LinkError(fmt::format("a chunk of {} bytes where at most {} were due", n, max));
  out.resize(n);
  read_exact(out.data(), n, timeout < 0 ? 60 : timeout);
  try {
    receive_cipher_.open(out, header["tag"].get<std::string>());
  } catch (const AuthError& e) {
    throw LinkError(e.what());
  }
  return true;
}

ReplicaLink ReplicaLink::connect(const std::string& addr, int port, const NodeAuth& auth, const nlohmann::json& intro,
                                 double timeout, LinkCanceller* cancel) {
  if (!auth.required()) throw LinkError("no key to authenticate the link with");  // never unauthenticated
  const auto deadline = deadline_of(timeout);
  Registered registered{cancel};
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw LinkError(fmt::format("{}: {}", addr, ::gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s < 0) continue;
    if (cancel != nullptr && !cancel->set(s)) {
      ::close(s);
      error = "the replication stops";
      break;
    }
    if (::connect(s, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, left_ms(deadline, true)) == 1 && ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
          err == 0) {
        fd = s;
        break;
      }
      error = err != 0 ? std::strerror(err) : "timed out";
    } else {
      error = std::strerror(errno);
    }
    if (cancel != nullptr) cancel->clear();
    ::close(s);
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw LinkError(fmt::format("cannot connect to {}:{}: {}", addr, port, error));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  ReplicaLink link(fd, AuthRole::kClient, std::string());
  Registered handshaking{cancel};  // cleared before `link` closes the socket, when this throws
  registered.cancel = nullptr;
  if (cancel != nullptr && !cancel->set(fd)) throw LinkError("the replication stops");
  try {
    const std::string nonce = random_nonce();
    Handshake handshake(AuthRole::kClient, auth.secret, nonce, kReplicaProtocolVersion);
    nlohmann::json hello = handshake.hello();
    if (auth.munge) hello["munge"] = auth.munge->client_credential(nonce);
    link.write_all(hello.dump(), "\n");
    const nlohmann::json challenge = nlohmann::json::parse(link.read_line(left_ms(deadline, true) / 1000.0));
    if (auth.munge) {
      if (!challenge.is_object() || !challenge.contains("munge") || !challenge["munge"].is_string()) {
        throw AuthError("its challenge has no MUNGE credential");
      }
      handshake.set_secret(auth.munge->accept(challenge["munge"], nonce));
    }
    link.write_all(handshake.on_challenge(challenge).dump(), "\n");
    link.key(AuthRole::kClient, session_from_handshake(handshake));
    link.send(intro);
  } catch (const AuthError& e) {
    throw LinkError(fmt::format("{}:{} did not prove {}: {}", addr, port, proof_words(auth), e.what()));
  } catch (const nlohmann::json::exception&) {
    throw LinkError(fmt::format("{}:{} answered something unreadable", addr, port));
  }
  return link;
}

ReplicaLink ReplicaLink::accept(int fd, const NodeAuth& auth, double timeout, nlohmann::json& intro,
                                LinkCanceller* cancel) {
  const std::string who = peer_address(fd);
  ReplicaLink link(fd, AuthRole::kServer, std::string());
  Registered registered{cancel};  // cleared before `link` closes the socket, when this throws
  if (cancel != nullptr && !cancel->set(fd)) throw LinkError("the replication stops");
  if (!auth.required()) throw LinkError("no key to authenticate the link with");  // never unauthenticated
  const auto deadline = deadline_of(timeout);
  bool challenged = false;  // the challenge sent: a peer that ends here could not check its proof
  try {
    Handshake handshake(AuthRole::kServer, auth.secret, random_nonce(), kReplicaProtocolVersion);
    const nlohmann::json hello = nlohmann::json::parse(link.read_line(timeout));
    if (hello.is_object() && hello.value("version", nlohmann::json()) != kReplicaProtocolVersion) {
      throw AuthError(fmt::format("its hello is of another ddprun (replication protocol {}, this node's {}): run one "
                                  "ddprun version on every node",
                                  hello.value("version", nlohmann::json()).dump(), kReplicaProtocolVersion));
    }
    const bool peer_uses_munge = hello.is_object() && hello.contains("munge");
    std::string credential;
    if (auth.munge) {
      if (!peer_uses_munge || !hello["munge"].is_string() || !hello.value("nonce", nlohmann::json()).is_string()) {
        throw AuthError("it authenticates with a secret, and this node with MUNGE");
      }
      MungeKeyExchange::Grant grant = auth.munge->grant(hello["munge"], hello["nonce"].get<std::string>());
      handshake.set_secret(std::move(grant.secret));
      credential = std::move(grant.credential);
    } else if (peer_uses_munge) {
      throw AuthError("it authenticates with MUNGE, and this node with the job's secret");
    }
    nlohmann::json challenge = handshake.on_hello(hello);
    if (auth.munge) challenge["munge"] = std::move(credential);
    link.write_all(challenge.dump(), "\n");
    challenged = true;
    handshake.on_proof(nlohmann::json::parse(link.read_line(left_ms(deadline, true) / 1000.0)));
    challenged = false;
    link.key(AuthRole::kServer, session_from_handshake(handshake));
    intro = link.receive(left_ms(deadline, true) / 1000.0);
  } catch (const AuthError& e) {
    throw LinkError(fmt::format("{} did not prove {}: {}; nothing it sent was taken", who, proof_words(auth), e.what()));
  } catch (const nlohmann::json::exception&) {
    throw LinkError(fmt::format("{} sent something unreadable in place of the handshake; nothing it sent was taken", who));
  } catch (const LinkError& e) {  // silent, gone or a line too long before it proved it knows the secret
    throw LinkError(fmt::format("{} did not finish the handshake{}: {}; nothing it sent was taken", who,
                                challenged ? " (it ended at the challenge, as a node with another secret does)" : "",
                                e.what()));
  }
  return link;
}

}  // namespace ddprun::elastic
