// Simulated ranks for the store benchmark (scripts/bench/store_scale.py): COUNT ranks in one
// process, on one thread and one epoll, that speak c10d's TCPStore protocol (version 2, as torch
// 2.x's client does; the encoding is in elastic/src/store/agent_store.hpp) to one server and do
// what init_process_group does with it. Written in C++ so that the clients cost the shared cores
// little next to the server: the benchmark's wall times are then the server's.
//
//   ddprun_store_clients FIRST COUNT WORLD PORT SOURCE_ADDRESS WINDOW
//
// It prints "ready" and waits for a line "connect" on stdin (so that a benchmark's processes all
// start at once); then ranks FIRST..FIRST+COUNT-1 of a job of WORLD ranks connect from
// SOURCE_ADDRESS (so that the processes of one run do not share its ephemeral ports) to
// 127.0.0.1:PORT and send VALIDATE and PING, at most WINDOW of them at once (a rank connects when
// an earlier one's PING is answered); when every one has its PING answered it prints
// "validated T". It then waits for a line "go" on stdin; each rank sends a SET of its address
// key and enters the store-based barrier of torch.distributed (ADD 1 to the barrier key, ADD 0 to
// read it, a SET of the last-worker key by the rank that read WORLD, WAIT for that key), then
// gets its neighbour's address key as gloo's key exchange does (WAIT, then GET). When every rank is through it prints
// "done T" and holds its connections until stdin closes, then resets them (no TIME_WAIT). T:
// CLOCK_MONOTONIC in seconds, the clock of Python's time.monotonic(). Any error: one line on
// stderr, exit 1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

// Query types of version 2.
constexpr std::uint8_t kValidate = 0, kSet = 1, kGet = 3, kAdd = 4, kWait = 6, kPing = 13;
constexpr std::uint32_t kMagic = 0x3C85F7CE;
const std::string kBarrier = "store_based_barrier_key:1";
const std::string kLastWorker = kBarrier + ":last_worker";

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "ddprun_store_clients: %s\n", what.c_str());
  std::exit(1);
}

double now() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_bytes(std::string& out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  out += s;
}
std::string query_set(const std::string& key, const std::string& value) {
  std::string q(1, static_cast<char>(kSet));
  put_bytes(q, key);
  put_bytes(q, value);
  return q;
}
std::string query_add(const std::string& key, std::int64_t n) {
  std::string q(1, static_cast<char>(kAdd));
  put_bytes(q, key);
  put(q, n);
  return q;
}
std::string query_wait(const std::string& key) {
  std::string q(1, static_cast<char>(kWait));
  put<std::uint64_t>(q, 1);
  put_bytes(q, key);
  return q;
}
std::string query_get(const std::string& key) {
  std::string q(1, static_cast<char>(kGet));
  put_bytes(q, key);
  return q;
}

// Where a rank is: each step names the reply it waits for.
enum class Step { kConnecting, kPing, kValidated, kAdd1, kAdd0, kWaitLast, kWaitPeer, kGetPeer, kDone };

struct Rank {
  int rank = 0;
  int fd = -1;
  Step step = Step::kConnecting;
  std::string inbox;
  std::string outbox;
};

class Clients {
 public:
  Clients(int first, int count, int world, int port, const std::string& source, int window)
      : world_(world), window_(window), epoll_(epoll_create1(EPOLL_CLOEXEC)), ranks_(static_cast<std::size_t>(count)) {
    if (epoll_ < 0) fail(std::string("epoll_create1: ") + std::strerror(errno));
    server_.sin_family = AF_INET;
    server_.sin_port = htons(static_cast<std::uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &server_.sin_addr);
    local_.sin_family = AF_INET;
    if (inet_pton(AF_INET, source.c_str(), &local_.sin_addr) != 1) fail("not an IPv4 address: " + source);
    for (int i = 0; i < count; ++i) ranks_[static_cast<std::size_t>(i)].rank = first + i;
  }

  // The first WINDOW ranks' connections; run_until_done() makes the others.
  void connect() {
    pending_ = static_cast<int>(ranks_.size());
    while (connecting_ < window_ && next_ < ranks_.size()) connect_next();
  }

  void run_until_done() {
    std::vector<epoll_event> events(1024);
    while (pending_ > 0) {
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 60000);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(n == 0 ? "no progress in 60 s" : std::string("epoll_wait: ") + std::strerror(errno));
      for (int i = 0; i < n; ++i) {
        Rank& r = *static_cast<Rank*>(events[static_cast<std::size_t>(i)].data.ptr);
        const std::uint32_t what = events[static_cast<std::size_t>(i)].events;
        if (what & (EPOLLERR | EPOLLHUP)) {
          int error = 0;
          socklen_t size = sizeof error;
          getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &error, &size);
          fail("rank " + std::to_string(r.rank) + ": " + (error ? std::strerror(error) : "the server closed the connection"));
        }
        if ((what & EPOLLOUT) && r.step == Step::kConnecting) {
          r.step = Step::kPing;
          std::string hello(1, static_cast<char>(kValidate));
          put(hello, kMagic);
          hello += static_cast<char>(kPing);
          put(hello, static_cast<std::uint32_t>(r.rank));
          send(r, hello);
        } else if (what & EPOLLOUT) {
          flush(r);
        }
        if (what & EPOLLIN) receive(r);
      }
    }
  }

  // Closes every connection with a reset: no TIME_WAIT left to hold the source addresses' ports
  // when the next run connects.
  void reset_all() {
    const linger now{1, 0};
    for (Rank& r : ranks_) {
      if (r.fd < 0) continue;
      setsockopt(r.fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
      ::close(r.fd);
      r.fd = -1;
    }
  }

  // Every rank's part of the barrier and the key exchange, all at once.
  void go() {
    pending_ = static_cast<int>(ranks_.size());
    for (Rank& r : ranks_) {
      r.step = Step::kAdd1;
      send(r, query_set("rank_" + std::to_string(r.rank), "127.0.0.1:" + std::to_string(10000 + r.rank % 50000)) +
                  query_add(kBarrier, 1));
    }
  }

 private:
  // Starts the next rank's connection: at most window_ of them are not validated at once.
  void connect_next() {
    Rank& r = ranks_[next_++];
    ++connecting_;
    r.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) fail(std::string("socket: ") + std::strerror(errno) + " (ulimit -n?)");
    const int one = 1;
    setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // The port is chosen by connect(), for the connection's four addresses: bind() would search
    // for a port free of every socket of the source address, the previous runs' TIME_WAIT ones
    // too (at 60,000 of them, a millisecond a bind).
    setsockopt(r.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (bind(r.fd, reinterpret_cast<sockaddr*>(&local_), sizeof local_) != 0) {
      fail(std::string("bind: ") + std::strerror(errno));
    }
    if (::connect(r.fd, reinterpret_cast<sockaddr*>(&server_), sizeof server_) != 0 && errno != EINPROGRESS) {
      fail(std::string("connect: ") + std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.ptr = &r;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, r.fd, &ev) != 0) fail(std::string("epoll_ctl: ") + std::strerror(errno));
  }

  void send(Rank& r, const std::string& bytes) {
    r.outbox += bytes;
    flush(r);
  }

  void flush(Rank& r) {
    while (!r.outbox.empty()) {
      const ssize_t n = ::send(r.fd, r.outbox.data(), r.outbox.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT (edge-triggered) comes back
        fail("rank " + std::to_string(r.rank) + ": send: " + std::strerror(errno));
      }
      r.outbox.erase(0, static_cast<std::size_t>(n));
    }
  }

  void receive(Rank& r) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(r.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        r.inbox.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) fail("rank " + std::to_string(r.rank) + ": the server closed the connection");
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      fail("rank " + std::to_string(r.rank) + ": recv: " + std::strerror(errno));
    }
    advance(r);
  }

  // Takes N bytes of reply into `out`, or returns false when they have not all arrived.
  static bool take(Rank& r, std::size_t n, std::string* out = nullptr) {
    if (r.inbox.size() < n) return false;
    if (out) *out = r.inbox.substr(0, n);
    r.inbox.erase(0, n);
    return true;
  }

  void advance(Rank& r) {
    std::string reply;
    for (;;) {
      switch (r.step) {
        case Step::kPing: {
          if (!take(r, 4, &reply)) return;
          std::uint32_t nonce = 0;
          std::memcpy(&nonce, reply.data(), sizeof nonce);
          if (nonce != static_cast<std::uint32_t>(r.rank)) fail("a PING answered with another nonce");
          r.step = Step::kValidated;
          --pending_;
          --connecting_;
          if (next_ < ranks_.size()) connect_next();
          break;
        }
        case Step::kAdd1:
          if (!take(r, 8)) return;
          r.step = Step::kAdd0;
          send(r, query_add(kBarrier, 0));
          break;
        case Step::kAdd0: {
          if (!take(r, 8, &reply)) return;
          std::int64_t count = 0;
          std::memcpy(&count, reply.data(), sizeof count);
          std::string next = count == world_ ? query_set(kLastWorker, "1") : std::string();
          r.step = Step::kWaitLast;
          send(r, next + query_wait(kLastWorker));
          break;
        }
        case Step::kWaitLast: {
          if (!take(r, 1)) return;
          const std::string peer = "rank_" + std::to_string((r.rank + 1) % world_);
          r.step = Step::kWaitPeer;
          send(r, query_wait(peer) + query_get(peer));
          break;
        }
        case Step::kWaitPeer:
          if (!take(r, 1)) return;
          r.step = Step::kGetPeer;
          break;
        case Step::kGetPeer: {
          std::uint64_t size = 0;
          if (r.inbox.size() < sizeof size) return;
          std::memcpy(&size, r.inbox.data(), sizeof size);
          if (!take(r, sizeof size + size)) return;
          r.step = Step::kDone;
          --pending_;
          break;
        }
        default:
          if (!r.inbox.empty()) fail("rank " + std::to_string(r.rank) + ": a reply it did not ask for");
          return;
      }
    }
  }

  int world_;
  int window_;
  int epoll_;
  sockaddr_in server_{};
  sockaddr_in local_{};
  std::vector<Rank> ranks_;  // never resized: epoll's events point into it
  std::size_t next_ = 0;     // the next rank to connect
  int connecting_ = 0;       // connected or connecting, not validated yet
  int pending_ = 0;
};

int number(const char* text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 0 || v > 1 << 30) fail(std::string("bad ") + what + ": " + text);
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) fail("usage: ddprun_store_clients FIRST COUNT WORLD PORT SOURCE_ADDRESS WINDOW");
  const int window = number(argv[6], "WINDOW");
  if (window < 1) fail("WINDOW must be at least 1");
  Clients clients(number(argv[1], "FIRST"), number(argv[2], "COUNT"), number(argv[3], "WORLD"),
                  number(argv[4], "PORT"), argv[5], window);
  std::string line;
  std::printf("ready\n");
  std::fflush(stdout);
  if (!std::getline(std::cin, line) || line != "connect") fail("no connect");
  clients.connect();
  clients.run_until_done();
  std::printf("validated %.6f\n", now());
  std::fflush(stdout);
  if (!std::getline(std::cin, line) || line != "go") fail("no go");
  clients.go();
  clients.run_until_done();
  std::printf("done %.6f\n", now());
  std::fflush(stdout);
  while (std::getline(std::cin, line)) {
  }  // hold the connections until the driver has read the server's figures
  clients.reset_all();
  return 0;
}
