#include "etcd/etcd_client.hpp"

#include <curl/curl.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace ddprun::elastic::etcd {

namespace {

// libcurl, opened the first time a run uses etcd. Linked, it and the 25 libraries it needs
// (TLS, HTTP/2, Kerberos, LDAP, ...) were loaded by every start of ddprun, which took 16.8 ms
// for `ddprun --version` instead of 9.4 ms (scripts/bench/startup.py, when it was
// linked). Only the ten functions below are used.
struct Curl {
  CURLcode (*global_init)(long flags) = nullptr;
  CURL* (*easy_init)() = nullptr;
  void (*easy_reset)(CURL* curl) = nullptr;
  CURLcode (*easy_setopt)(CURL* curl, CURLoption option, ...) = nullptr;
  CURLcode (*easy_perform)(CURL* curl) = nullptr;
  CURLcode (*easy_getinfo)(CURL* curl, CURLINFO info, ...) = nullptr;
  void (*easy_cleanup)(CURL* curl) = nullptr;
  const char* (*easy_strerror)(CURLcode code) = nullptr;
  curl_slist* (*slist_append)(curl_slist* list, const char* text) = nullptr;
  void (*slist_free_all)(curl_slist* list) = nullptr;
  std::string error;  // why it cannot be used; empty: loaded and initialised
};

Curl open_curl() {
  Curl c;
  void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    c.error = ::dlerror();
    return c;
  }
  bool missing = false;
  const auto symbol = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(::dlsym(lib, name));
    if (function == nullptr && !missing) {
      missing = true;
      c.error = fmt::format("libcurl.so.4 has no {}", name);
    }
  };
  symbol(c.global_init, "curl_global_init");
  symbol(c.easy_init, "curl_easy_init");
  symbol(c.easy_reset, "curl_easy_reset");
  symbol(c.easy_setopt, "curl_easy_setopt");
  symbol(c.easy_perform, "curl_easy_perform");
  symbol(c.easy_getinfo, "curl_easy_getinfo");
  symbol(c.easy_cleanup, "curl_easy_cleanup");
  symbol(c.easy_strerror, "curl_easy_strerror");
  symbol(c.slist_append, "curl_slist_append");
  symbol(c.slist_free_all, "curl_slist_free_all");
  if (!missing && c.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) c.error = "curl_global_init failed";
  return c;  // the library stays open: ddprun uses it until it exits
}

// Opened once, by the first caller; thread-safe.
const Curl& curl() {
  static const Curl lib = open_curl();
  return lib;
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl().slist_free_all(list); }
};

// What a transfer collects: the whole body, or (a watch) one JSON message per line.
struct Sink {
  std::string data;
  const std::function<void(const nlohmann::json&)>* on_line = nullptr;
  std::function<bool()> stop;  // a watch: ends the transfer when true; none for a call
  std::string error;  // a line that was not JSON
};

size_t on_data(char* ptr, size_t size, size_t n, void* user) {
  auto& sink = *static_cast<Sink*>(user);
  sink.data.append(ptr, size * n);
  if (sink.on_line) {
    std::size_t nl;
    while ((nl = sink.data.find('\n')) != std::string::npos) {
      const std::string line = sink.data.substr(0, nl);
      sink.data.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      auto message = nlohmann::json::parse(line, nullptr, false);
      if (message.is_discarded()) {
        sink.error = "etcd sent a watch message that is not JSON";
        return 0;
      }
      (*sink.on_line)(message);
    }
  }
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto& sink = *static_cast<Sink*>(user);
  return sink.stop && sink.stop() ? 1 : 0;
}

}  // namespace

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, EtcdSettings settings)
    : endpoints_(std::move(endpoints)), settings_(std::move(settings)) {}

EtcdClient::~EtcdClient() {
  for (void* handle : idle_) curl().easy_cleanup(static_cast<CURL*>(handle));
}

EtcdClient::Connection::~Connection() {
  if (handle_) curl().easy_cleanup(static_cast<CURL*>(handle_));
}

// A handle whose connections a call before left open (HTTP keep-alive): on a slow link, a new
// connection costs a round trip more per call. From the caller's own Connection, or else the
// pool: one per call under way, as many as ran at once.
void* EtcdClient::borrow_handle(Connection* own, std::string& error) {
  if (!curl().error.empty()) {
    error = load_libcurl();
    return nullptr;
  }
  if (own && own->handle_) return own->handle_;
  void* handle = nullptr;
  if (!own) {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      handle = idle_.back();
      idle_.pop_back();
    }
  }
  if (!handle) handle = curl().easy_init();
  if (handle == nullptr) error = "curl_easy_init failed";
  if (own) own->handle_ = handle;
  return handle;
}

void EtcdClient::return_handle(Connection* own, void* handle) {
  if (!handle || own) return;
  std::lock_guard lock(mutex_);
  idle_.push_back(handle);
}

double EtcdClient::first_try() const {
  std::lock_guard lock(mutex_);
  return std::max(kFirstTry, 3 * slowest_);
}

void EtcdClient::answered_in(double seconds) {
  std::lock_guard lock(mutex_);
  slowest_ = std::max(seconds, 0.9 * slowest_ + 0.1 * seconds);
}

std::string load_libcurl() {
  const std::string& error = curl().error;
  if (error.empty()) return {};
  return fmt::format("the etcd rendezvous needs libcurl, which could not be loaded ({}); install it (Debian: "
                     "libcurl4)",
                     error);
}

std::string EtcdClient::url(std::size_t member, const std::string& path) const {
  const Endpoint& e = endpoints_[member];
  const bool v6 = e.host.find(':') != std::string::npos;
  return fmt::format("{}://{}{}{}:{}{}", settings_.protocol, v6 ? "[" : "", e.host, v6 ? "]" : "", e.port, path);
}

std::string EtcdClient::describe() const {
  std::string text;
  for (std::size_t i = 0; i < endpoints_.size(); ++i) text += (i ? "," : "") + url(i, "");
  return text;
}

std::string EtcdClient::local_address() const {
  std::lock_guard lock(mutex_);
  return local_ip_;
}

namespace {

// One POST through the handle `c` (its earlier connections reused); returns false when the
// member could not be reached (`error` says why).
bool post(CURL* c, const std::string& url, const std::string& body, double timeout, const EtcdSettings& settings,
          const std::string& token, Sink& sink, long& status, std::string& local_ip, std::string& error) {
  curl().easy_reset(c);  // the options of its last transfer; not its connections
  std::unique_ptr<curl_slist, SlistDeleter> headers(curl().slist_append(nullptr, "Content-Type: application/json"));
  if (!token.empty()) headers.reset(curl().slist_append(headers.release(), ("Authorization: " + token).c_str()));
  curl().easy_setopt(c, CURLOPT_URL, url.c_str());
  curl().easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl().easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl().easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl().easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl().easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl().easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl().easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>((timeout > 0 ? std::min(timeout, 5.0) : 5.0) * 1000));
  if (sink.stop) {
    // A watch: no time limit, but it ends when `stop` says so (asked about once a second).
    curl().easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl().easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl().easy_setopt(c, CURLOPT_XFERINFODATA, &sink);
    curl().easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  } else {
    curl().easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout * 1000));
  }
  if (!settings.cacert.empty()) curl().easy_setopt(c, CURLOPT_CAINFO, settings.cacert.c_str());
  if (!settings.cert.empty()) curl().easy_setopt(c, CURLOPT_SSLCERT, settings.cert.c_str());
  if (!settings.key.empty()) curl().easy_setopt(c, CURLOPT_SSLKEY, settings.key.c_str());
  char message[CURL_ERROR_SIZE] = "";
  curl().easy_setopt(c, CURLOPT_ERRORBUFFER, message);
  const CURLcode rc = curl().easy_perform(c);
  char* ip = nullptr;
  if (curl().easy_getinfo(c, CURLINFO_LOCAL_IP, &ip) == CURLE_OK && ip) local_ip = ip;
  curl().easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_ABORTED_BY_CALLBACK && sink.stop && sink.stop()) return true;
  if (rc != CURLE_OK) {
    error = !sink.error.empty() ? sink.error : message[0] ? message : curl().easy_strerror(rc);
    return false;
  }
  return true;
}

EtcdError answer_error(const std::string& url, long status, const nlohmann::json& body) {
  const auto& e = body.contains("error") && body["error"].is_object() ? body["error"] : body;
  const std::string message = e.value("message", e.value("error", body.dump()));
  return EtcdError(fmt::format("etcd at {} answered {}: {}", url, status, message), false, e.value("code", 0));
}

}  // namespace

void EtcdClient::authenticate(std::size_t member, double timeout) {
  Sink sink;
  long status = 0;
  std::string ip, error;
  const std::string u = url(member, "/v3/auth/authenticate");
  const nlohmann::json body = {{"name", settings_.user}, {"password", settings_.password}};
  CURL* c = static_cast<CURL*>(borrow_handle(nullptr, error));
  const bool reached = c && post(c, u, body.dump(), timeout, settings_, "", sink, status, ip, error);
  return_handle(nullptr, c);
  if (!reached) throw EtcdError(error, true);
  const auto answer = nlohmann::json::parse(sink.data, nullptr, false);
  if (status != 200 || answer.is_discarded() || !answer.contains("token")) {
    throw EtcdError(fmt::format("etcd at {} refused user '{}': {}", u, settings_.user, sink.data), false);
  }
  std::lock_guard lock(mutex_);
  token_ = answer["token"];
}

std::string EtcdClient::token() {
  std::lock_guard lock(mutex_);
  return token_;
}

nlohmann::json EtcdClient::call(const std::string& path, const nlohmann::json& body, double budget, Connection* own) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget));
  const auto left = [&] { return std::chrono::duration<double>(deadline - Clock::now()).count(); };
  const std::string text = body.dump();
  const std::size_t members = endpoints_.size();
  std::size_t member;
  {
    std::lock_guard lock(mutex_);
    member = current_;
  }
  std::vector<std::string> errors(members);  // each member's last
  // With one member there is no other to try: a try cut short would only have to begin again,
  // on a new connection.
  double try_timeout = members == 1 ? budget : first_try();
  bool new_token = false;
  std::size_t failures = 0;
  auto round_started = Clock::now();
  const auto next_member = [&](const std::string& why) {
    errors[member] = fmt::format("{}: {}", url(member, path), why);
    member = (member + 1) % members;
    if (++failures % members != 0) return;
    // Every member failed this round. If they all refused at once (etcd is down or restarting),
    // pause rather than spin; then give each longer.
    if (Clock::now() - round_started < std::chrono::milliseconds(50)) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(left(), 0.0, 0.1)));
    }
    try_timeout *= 2;
    round_started = Clock::now();
  };
  for (;;) {
    const double wait = std::min(try_timeout, left());
    if (wait <= 0.001) break;
    const std::string u = url(member, path);
    try {
      if (!settings_.user.empty() && token().empty()) authenticate(member, wait);
    } catch (const EtcdError& e) {
      if (!e.unreachable) throw;
      next_member(e.what());
      continue;
    }
    Sink sink;
    long status = 0;
    std::string ip, error;
    CURL* c = static_cast<CURL*>(borrow_handle(own, error));
    const auto sent = Clock::now();
    const bool reached = c && post(c, u, text, wait, settings_, token(), sink, status, ip, error);
    return_handle(own, c);
    if (!reached) {
      next_member(error);
      continue;
    }
    answered_in(std::chrono::duration<double>(Clock::now() - sent).count());
    // The member that answered is the one to ask first next time (and the watch's: see watch()).
    const auto answered = [&] {
      std::lock_guard lock(mutex_);
      current_ = member;
      if (!ip.empty()) local_ip_ = ip;
    };
    auto answer = nlohmann::json::parse(sink.data, nullptr, false);
    if (answer.is_discarded()) {
      answered();
      throw EtcdError(fmt::format("etcd at {} answered {} with no JSON", u, status), false);
    }
    if (status == 200 && !answer.contains("error")) {
      answered();
      return answer;
    }
    EtcdError e = answer_error(u, status, answer);
    // An expired auth token (gRPC UNAUTHENTICATED, or etcd's "invalid auth token"): once more with a new one.
    if (!settings_.user.empty() && !new_token &&
        (e.code == 16 || std::string(e.what()).find("auth token") != std::string::npos)) {
      new_token = true;
      std::lock_guard lock(mutex_);
      token_.clear();
      continue;  // the same member again
    }
    // A member without a leader cannot serve (gRPC UNAVAILABLE: "no leader", "request timed
    // out", "leader changed"): another may.
    if (e.code == 14 || status >= 500) {
      next_member(e.what());
      continue;
    }
    answered();
    throw e;
  }
  std::string all;
  for (std::size_t i = 0; i < members; ++i) {
    const std::string& e = errors[(member + i) % members];
    if (!e.empty()) all += (all.empty() ? "" : "; ") + e;
  }
  throw EtcdError(all.empty() ? fmt::format("no answer from etcd at {} within {} s", describe(), budget) : all, true);
}

void EtcdClient::watch(const nlohmann::json& create_request,
                       const std::function<void(const nlohmann::json&)>& on_message, const std::atomic<bool>& stop) {
  std::size_t member;
  {
    std::lock_guard lock(mutex_);
    member = current_;
  }
  const std::string u = url(member, "/v3/watch");
  if (!settings_.user.empty() && token().empty()) authenticate(member, first_try());
  const auto moved = [&] {
    std::lock_guard lock(mutex_);
    return current_ != member;
  };
  Sink sink;
  sink.on_line = &on_message;
  sink.stop = [&] { return stop.load() || moved(); };
  long status = 0;
  std::string ip, error;
  const nlohmann::json body = {{"create_request", create_request}};
  CURL* c = static_cast<CURL*>(borrow_handle(nullptr, error));
  const bool reached = c && post(c, u, body.dump(), first_try(), settings_, token(), sink, status, ip, error);
  return_handle(nullptr, c);
  if (stop || moved()) return;
  {
    // Next time, another member: this one dropped the stream or could not be reached.
    std::lock_guard lock(mutex_);
    if (current_ == member) current_ = (member + 1) % endpoints_.size();
  }
  if (!reached) throw EtcdError(fmt::format("{}: {}", u, error), true);
  throw EtcdError(fmt::format("{}: the watch stream ended (HTTP {}){}", u, status,
                              sink.data.empty() ? "" : ": " + sink.data.substr(0, 200)),
                  true);
}

}  // namespace ddprun::elastic::etcd
