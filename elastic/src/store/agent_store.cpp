#include "store/agent_store.hpp"
#include "store/tcpstore_greeting.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>

namespace ddprun::elastic {

namespace {

// The queries of both versions under one name each.
enum class Op {
  kValidate, kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kNumKeys, kWatchKey, kDeleteKey,
  kAppend, kMultiGet, kMultiSet, kCancelWait, kPing, kQueuePush, kQueuePop, kQueueLen, kListKeys,
};

std::optional<Op> decode(AgentStore::Version version, std::uint8_t type) {
  static constexpr Op kVersion1[] = {Op::kSet,   Op::kCompareSet, Op::kGet,      Op::kAdd,      Op::kCheck,
                                     Op::kWait,  Op::kNumKeys,    Op::kWatchKey, Op::kDeleteKey};
  // VALIDATE (0) only opens a connection: handle_query() refuses it afterwards.
  static constexpr Op kVersion2[] = {Op::kValidate,  Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,
                                     Op::kCheck,     Op::kWait,     Op::kNumKeys,    Op::kDeleteKey, Op::kAppend,
                                     Op::kMultiGet,  Op::kMultiSet, Op::kCancelWait, Op::kPing,      Op::kQueuePush,
                                     Op::kQueuePop,  Op::kQueueLen, Op::kListKeys};
  if (version == AgentStore::Version::k1 && type < std::size(kVersion1)) return kVersion1[type];
  if (version == AgentStore::Version::k2 && type < std::size(kVersion2)) return kVersion2[type];
  return std::nullopt;
}

// Watch notifications (version 1).
constexpr std::uint8_t kKeyUpdated = 0;
constexpr std::uint8_t kKeyCreated = 1;
constexpr std::uint8_t kKeyDeleted = 2;
constexpr std::uint8_t kCallbackRegistered = 3;
// Replies of single bytes.
constexpr std::uint8_t kReady = 0;
constexpr std::uint8_t kNotReady = 1;
constexpr std::uint8_t kStopWaiting = 0;
constexpr std::uint8_t kWaitCanceled = 1;

// Reads one query's fields from the bytes received so far. The first read that runs past the
// end makes it incomplete, the first that breaks a limit malformed; later reads do nothing.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  bool ok() const { return incomplete_ == false && error_.empty(); }
  bool malformed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  std::size_t used() const { return pos_; }

  template <class T>
  T value() {
    T v{};
    if (const char* p = take(sizeof v)) std::memcpy(&v, p, sizeof v);
    return v;
  }

  std::uint64_t count() {
    const auto n = value<std::uint64_t>();
    if (ok() && n > AgentStore::kMaxKeysPerQuery) {
      fail(fmt::format("{} keys in one query (at most {})", n, AgentStore::kMaxKeysPerQuery));
    }
    return ok() ? n : 0;
  }

  std::string key() { return sized(AgentStore::kMaxKeyBytes, "a key"); }
  std::string bytes() { return sized(AgentStore::kMaxMessageBytes, "a value"); }

 private:
  std::string sized(std::uint64_t max, const char* what) {
    const auto n = value<std::uint64_t>();
    if (!ok()) return {};
    if (n > max || n > AgentStore::kMaxMessageBytes - pos_) {
      fail(fmt::format("{} of {} bytes (at most {}, and {} for a whole query)", what, n, max,
                       AgentStore::kMaxMessageBytes));
      return {};
    }
    const char* p = take(static_cast<std::size_t>(n));
    return p ? std::string(p, static_cast<std::size_t>(n)) : std::string();
  }

  const char* take(std::size_t n) {
    if (!ok()) return nullptr;
    if (data_.size() - pos_ < n) {
      incomplete_ = true;
      return nullptr;
    }
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }

  void fail(std::string error) { error_ = std::move(error); }

  std::string_view data_;
  std::size_t pos_ = 0;
  bool incomplete_ = false;
  std::string error_;
};

// A reply, in the encoding of Reader.
class Writer {
 public:
  template <class T>
  Writer& value(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& bytes(const std::string& s) {
    value<std::uint64_t>(s.size());
    out_ += s;
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

void AgentStore::connect(ClientId client) { clients_[client] = Client{}; }

AgentStore::Version AgentStore::version(ClientId client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? Version::kUnknown : it->second.version;
}

bool AgentStore::receive(ClientId id, std::string_view bytes, std::vector<Send>& out, std::string& why) {
  Client& client = clients_[id];
  client.pending.append(bytes);
  const std::string_view data = client.pending;
  std::size_t offset = 0;
  while (offset < data.size()) {
    std::size_t used = 0;
    const Parse parse = client.version == Version::kUnknown
                            ? handshake(client, data.substr(offset), used)
                            : handle_query(id, client, data.substr(offset), used, out, why);
    if (parse == Parse::kMalformed) return false;
    if (parse == Parse::kIncomplete) break;
    offset += used;
  }
  client.pending.erase(0, offset);
  return true;
}

AgentStore::Parse AgentStore::handshake(Client& client, std::string_view data, std::size_t& used) {
  if (data[0] != 0) {
    client.version = Version::k1;
    return Parse::kDone;
  }
  if (data.size() < 1 + sizeof kTcpStoreValidationMagic) return Parse::kIncomplete;
  std::uint32_t magic = 0;
  std::memcpy(&magic, data.data() + 1, sizeof magic);
  if (magic == kTcpStoreValidationMagic) {
    client.version = Version::k2;
    used = 1 + sizeof magic;
  } else {
    client.version = Version::k1;  // a SET: its key's length follows
  }
  return Parse::kDone;
}

AgentStore::Parse AgentStore::handle_query(ClientId id, Client& client, std::string_view data, std::size_t& used,
                                           std::vector<Send>& out, std::string& why) {
  Reader in(data);
  const auto type = in.value<std::uint8_t>();
  if (!in.ok()) return Parse::kIncomplete;
  const std::optional<Op> op = decode(client.version, type);
  const char* generation = client.version == Version::k1 ? "1.x" : "2.x";
  if (!op) {
    why = fmt::format("query type {}, which no torch {} client sends", type, generation);
    return Parse::kMalformed;
  }
  Writer reply;
  // Every field first: nothing happens until the whole query has arrived.
  const auto read_keys = [&in] {
    std::vector<std::string> keys(in.count());
    for (auto& key : keys) key = in.key();
    return keys;
  };
  const auto finish = [&]() -> Parse {
    if (in.malformed()) {
      why = in.error();
      return Parse::kMalformed;
    }
    return in.ok() ? Parse::kDone : Parse::kIncomplete;
  };
  const auto respond = [&] {
    std::string bytes = reply.take();
    if (!bytes.empty()) out.push_back({id, std::move(bytes)});
  };

  switch (*op) {
    case Op::kValidate:
      why = "a second VALIDATE";
      return Parse::kMalformed;
    case Op::kSet: {
      std::string key = in.key();
      std::string value = in.bytes();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      store(key, std::move(value), out);
      break;
    }
    case Op::kCompareSet: {
      std::string key = in.key();
      std::string expected = in.bytes();
      std::string desired = in.bytes();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = keys_.find(key);
      // A missing key is created only when the caller expected none; otherwise the answer is
      // the expected value, as PyTorch's servers answer.
      const bool swap = it == keys_.end() ? expected.empty() : it->second == expected;
      const std::string& current = it == keys_.end() ? (swap ? desired : expected) : (swap ? desired : it->second);
      reply.bytes(current);
      respond();
      if (swap) store(key, std::move(desired), out);
      break;
    }
    case Op::kGet: {
      const std::string key = in.key();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = keys_.find(key);
      reply.bytes(it == keys_.end() ? std::string() : it->second);
      break;
    }
    case Op::kAdd: {
      const std::string key = in.key();
      auto sum = in.value<std::int64_t>();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      if (const auto it = keys_.find(key); it != keys_.end()) {
        try {
          // Wraps around on overflow, where PyTorch's servers have undefined behaviour.
          sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(sum) +
                                          static_cast<std::uint64_t>(std::stoll(it->second)));
        } catch (const std::exception&) {
          why = fmt::format("ADD to key '{}', whose value is not an integer", key.substr(0, 100));
          return Parse::kMalformed;
        }
      }
      reply.value<std::int64_t>(sum);
      respond();
      store(key, std::to_string(sum), out);
      break;
    }
    case Op::kCheck: {
      const std::vector<std::string> keys = read_keys();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const bool all = std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return exists(k); });
      reply.value<std::uint8_t>(all ? kReady : kNotReady);
      break;
    }
    case Op::kWait: {
      const std::vector<std::string> keys = read_keys();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      // A torch 1.x client that timed out does not cancel its wait: a new one replaces it.
      end_wait(id, client);
      for (const std::string& key : keys) {
        if (exists(key)) continue;
        waiters_[key].push_back(id);
        client.awaiting.push_back(key);
        ++client.keys_awaited;
      }
      if (client.keys_awaited == 0) reply.value<std::uint8_t>(kStopWaiting);
      break;
    }
    case Op::kNumKeys:
      reply.value<std::int64_t>(static_cast<std::int64_t>(keys_.size()));
      break;
    case Op::kWatchKey: {
      const std::string key = in.key();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      watchers_[key].insert(id);
      reply.value<std::uint8_t>(kCallbackRegistered);
      break;
    }
    case Op::kDeleteKey: {
      const std::string key = in.key();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = keys_.find(key);
      reply.value<std::int64_t>(it == keys_.end() ? 0 : 1);
      respond();
      if (it != keys_.end()) {
        const std::string old = std::move(it->second);
        keys_.erase(it);
        notify_watchers(key, kKeyDeleted, old, {}, out);
      }
      break;
    }
    case Op::kAppend: {
      const std::string key = in.key();
      const std::string tail = in.bytes();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = keys_.find(key);
      store(key, it == keys_.end() ? tail : it->second + tail, out);
      break;
    }
    case Op::kMultiGet: {
      const std::vector<std::string> keys = read_keys();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      for (const std::string& key : keys) {
        const auto it = keys_.find(key);
        reply.bytes(it == keys_.end() ? std::string() : it->second);
      }
      break;
    }
    case Op::kMultiSet: {
      std::vector<std::pair<std::string, std::string>> entries(in.count());
      for (auto& [key, value] : entries) {
        key = in.key();
        value = in.bytes();
      }
      if (const Parse p = finish(); p != Parse::kDone) return p;
      for (auto& [key, value] : entries) store(key, std::move(value), out);
      break;
    }
    case Op::kCancelWait:
      end_wait(id, client);
      reply.value<std::uint8_t>(kWaitCanceled);
      break;
    case Op::kPing: {
      const auto nonce = in.value<std::uint32_t>();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      reply.value(nonce);
      break;
    }
    case Op::kQueuePush: {
      const std::string key = in.key();
      std::string value = in.bytes();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      queues_[key].push_back(std::move(value));
      wake_one_waiter(key, out);
      break;
    }
    case Op::kQueuePop: {
      const std::string key = in.key();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = queues_.find(key);
      const std::size_t length = it == queues_.end() ? 0 : it->second.size();
      reply.value<std::int64_t>(static_cast<std::int64_t>(length));
      if (length > 0) {
        reply.bytes(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) queues_.erase(it);
      }
      break;
    }
    case Op::kQueueLen: {
      const std::string key = in.key();
      if (const Parse p = finish(); p != Parse::kDone) return p;
      const auto it = queues_.find(key);
      reply.value<std::int64_t>(it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
      break;
    }
    case Op::kListKeys:
      reply.value<std::int64_t>(static_cast<std::int64_t>(keys_.size()));
      for (const auto& entry : keys_) reply.bytes(entry.first);
      break;
  }
  respond();
  used = in.used();
  return Parse::kDone;
}

bool AgentStore::exists(const std::string& key) const {
  if (keys_.count(key) != 0) return true;
  const auto queue = queues_.find(key);
  return queue != queues_.end() && !queue->second.empty();
}

void AgentStore::store(const std::string& key, std::string value, std::vector<Send>& out) {
  auto [it, created] = keys_.try_emplace(key);
  std::string old = std::exchange(it->second, std::move(value));
  notify_watchers(key, created ? kKeyCreated : kKeyUpdated, old, it->second, out);
  wake_waiters(key, out);
}

void AgentStore::wake_waiters(const std::string& key, std::vector<Send>& out) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<ClientId> ids = std::move(it->second);
  waiters_.erase(it);
  for (ClientId id : ids) {
    const auto client = clients_.find(id);
    if (client != clients_.end() && client->second.keys_awaited > 0 && --client->second.keys_awaited == 0) {
      out.push_back({id, std::string(1, static_cast<char>(kStopWaiting))});
    }
  }
}

// A pushed value is for one popper: only the longest waiter learns of it.
void AgentStore::wake_one_waiter(const std::string& key, std::vector<Send>& out) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const ClientId id = it->second.front();
  it->second.erase(it->second.begin());
  if (it->second.empty()) waiters_.erase(it);
  const auto client = clients_.find(id);
  if (client != clients_.end() && client->second.keys_awaited > 0 && --client->second.keys_awaited == 0) {
    out.push_back({id, std::string(1, static_cast<char>(kStopWaiting))});
  }
}

void AgentStore::notify_watchers(const std::string& key, std::uint8_t kind, const std::string& old_value,
                                 const std::string& new_value, std::vector<Send>& out) {
  const auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  Writer change;
  change.value(kind).bytes(key).bytes(old_value).bytes(new_value);
  const std::string bytes = change.take();
  for (ClientId id : it->second) out.push_back({id, bytes});
}

// Only the keys the client waits for: a job's store may have as many waited keys as ranks.
void AgentStore::end_wait(ClientId id, Client& client) {
  if (client.keys_awaited > 0) {
    for (const std::string& key : client.awaiting) {
      const auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;  // set since
      auto& ids = it->second;
      ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
      if (ids.empty()) waiters_.erase(it);
    }
  }
  client.keys_awaited = 0;
  client.awaiting.clear();
}

void AgentStore::disconnect(ClientId id) {
  const auto it = clients_.find(id);
  if (it == clients_.end()) return;
  end_wait(id, it->second);
  for (auto w = watchers_.begin(); w != watchers_.end();) {
    w->second.erase(id);
    w = w->second.empty() ? watchers_.erase(w) : std::next(w);
  }
  clients_.erase(it);
}

void AgentStore::clear() {
  keys_.clear();
  queues_.clear();
  waiters_.clear();
  watchers_.clear();
  clients_.clear();
}

}  // namespace ddprun::elastic
