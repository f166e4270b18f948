// etcd's v3 API through its JSON gateway (/v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/watch,
// ...) over HTTP or HTTPS with libcurl. Every call blocks: make them from a helper thread, never
// from the launcher's event loop. Safe to use from several threads at once (one curl handle per
// call; the handles, with their open connections, are kept for the next calls).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "etcd/etcd_backend.hpp"

namespace ddprun::elastic::etcd {

// No member answered (`unreachable`), or one answered with an error.
class EtcdError : public std::runtime_error {
 public:
  EtcdError(const std::string& what, bool unreachable, int code = 0)
      : std::runtime_error(what), unreachable(unreachable), code(code) {}
  bool unreachable;
  int code;  // the gRPC status code etcd gave; 0 when none
};

// Opens libcurl, once per process (it is not linked: see etcd_client.cpp). Returns why it
// cannot be used, as a sentence for the user; empty when it can.
std::string load_libcurl();

class EtcdClient {
 public:
  // `endpoints`: the members, any of which will do; `settings`: TLS and user from --rdzv_conf.
  EtcdClient(std::vector<Endpoint> endpoints, EtcdSettings settings);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The first try of a call at a member waits at least this long for its answer, and three times
  // as long as the slowest recent answer (first_try()): on a slow link a try must not end before
  // its answer comes. Each later round over the members waits twice as long as the one before.
  // With one member, a try has the call's whole budget.
  static constexpr double kFirstTry = 0.5;

  // POSTs `body` to `path` and returns the answer of the first member that gives one, starting
  // with the last one that did, going round the members until `budget` seconds have passed.
  // A member that is down refuses at once; one that hangs (stopped, or a follower whose request
  // waits for a Raft leader that died: etcd holds it about 7 s) is left after kFirstTry, and
  // tried again in a later round. So a call may reach etcd twice: each write ddprun makes is
  // one that does the same again, or one whose readers act on a key's first version only.
  // Throws EtcdError: unreachable when no member answered in time, else etcd's own refusal.
  // With `own`, through that connection (a thread's own: see Connection), else through one of
  // the client's.
  class Connection;
  nlohmann::json call(const std::string& path, const nlohmann::json& body, double budget = 5,
                      Connection* own = nullptr);

  // A connection of one caller's own, kept open between its calls: the lease's keep-alives, two
  // threads in turn, each keep theirs ready, where from the shared ones a keep-alive sent while
  // the other's answer is late would open a new one (a round trip more, on a slow link).
  class Connection {
   public:
    Connection() = default;
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

   private:
    friend class EtcdClient;
    void* handle_ = nullptr;  // a CURL*, made at the first call
  };

  // Opens a watch with `create_request` at the member that answered last, and calls
  // `on_message` with every message of the stream. Returns when `stop` becomes true, or when a
  // call has moved to another member since the watch opened (this one may hang without a
  // word: call watch() again to follow); throws EtcdError when the stream breaks.
  void watch(const nlohmann::json& create_request, const std::function<void(const nlohmann::json&)>& on_message,
             const std::atomic<bool>& stop);

  // The local address of the last call that reached a member: this node's address as etcd's
  // network sees it. Empty before.
  std::string local_address() const;
  // "http://127.0.0.1:2379,http://127.0.0.1:2380", for messages.
  std::string describe() const;

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string local_ip;
  };
  std::string url(std::size_t member, const std::string& path) const;
  std::string token();
  void authenticate(std::size_t member, double timeout);
  // A CURL*: `own`'s, or one of the pool; null with `error` when libcurl cannot be used.
  void* borrow_handle(Connection* own, std::string& error);
  void return_handle(Connection* own, void* handle);
  double first_try() const;
  // A member answered a call's try in `seconds`: slowest_ takes it at once if it is slower, and
  // forgets a slow one a tenth at a time.
  void answered_in(double seconds);

  std::vector<Endpoint> endpoints_;
  EtcdSettings settings_;
  mutable std::mutex mutex_;
  std::size_t current_ = 0;  // the member that answered last
  std::string local_ip_;
  std::string token_;        // with a user: from /v3/auth/authenticate
  std::vector<void*> idle_;  // curl handles between calls
  double slowest_ = 0;       // seconds: the slowest recent answer (answered_in)
};

}  // namespace ddprun::elastic::etcd
