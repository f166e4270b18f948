#include "replica/replicator.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "auth/rendezvous_auth.hpp"
#include "replica/link.hpp"
#include "replica/slots.hpp"

namespace ddprun::elastic {

std::string folder_identity(const std::string& folder) {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  struct stat st {};
  ::stat(folder.c_str(), &st);
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (const char c : fmt::format("{}:{}:{}", boot_id, static_cast<unsigned long long>(st.st_dev),
                                  static_cast<unsigned long long>(st.st_ino))) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return fmt::format("{:016x}", hash);
}

std::string shared_folder(const std::vector<SnapshotPeer>& ring) {
  std::map<std::string, std::string> seen;  // folder identity -> node
  for (const SnapshotPeer& peer : ring) {
    const std::string folder = peer.node.substr(0, peer.node.find('-'));
    const auto [it, added] = seen.emplace(folder, peer.node);
    if (!added) return fmt::format("{} and {}", it->second, peer.node);
  }
  return "";
}

bool replicable_path(const std::string& path) {
  if (path.empty() || path.size() > 4000 || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  std::size_t begin = 0;
  bool first = true;
  for (;;) {
    const std::size_t slash = path.find('/', begin);
    const std::string part = path.substr(begin, slash == std::string::npos ? std::string::npos : slash - begin);
    if (part.empty() || part == "." || part == ".." || (first && part == kIncomingFolder)) return false;
    if (slash == std::string::npos) return true;
    begin = slash + 1;
    first = false;
  }
}

Replicator::Replicator(Settings settings, Say say)
    : settings_(std::move(settings)), say_(std::move(say)), manifest_("") {
  if (const std::string problem = load_libcrypto(); !problem.empty()) throw std::runtime_error(problem);
  std::string error = "no address";
  if (settings_.listen_addr.empty()) {
    // Every address: IPv6 and IPv4 on one socket where the node has IPv6, else IPv4's.
    const int s6 = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s6 >= 0) {
      const int off = 0;
      ::setsockopt(s6, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
      sockaddr_in6 any{};
      any.sin6_family = AF_INET6;
      any.sin6_addr = in6addr_any;
      if (::bind(s6, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 && ::listen(s6, 64) == 0) {
        listen_fd_ = s6;
      } else {
        ::close(s6);
      }
    }
    if (listen_fd_ < 0) settings_.listen_addr = "0.0.0.0";
  }
  if (listen_fd_ < 0) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(settings_.listen_addr.c_str(), "0", &hints, &found); rc != 0) {
      throw std::runtime_error(fmt::format("snapshot replication: {}: {}", settings_.listen_addr, ::gai_strerror(rc)));
    }
    for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s, 64) == 0) {
        listen_fd_ = s;
        break;
      }
      error = std::strerror(errno);
      ::close(s);
    }
    ::freeaddrinfo(found);
  }
  if (listen_fd_ < 0) {
    throw std::runtime_error(fmt::format("snapshot replication cannot listen on {}: {}", settings_.listen_addr, error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  node_ = folder_identity(settings_.folder) + "-" + random_nonce().substr(0, 8);
  manifest_ = Manifest(node_);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error(fmt::format("snapshot replication: pipe: {}", std::strerror(errno)));
  }
  // Made at start, emptied of what a killed ddprun left there (never whole), removed at the end.
  const std::string incoming = settings_.folder + "/" + kIncomingFolder;
  std::error_code ignored;
  std::filesystem::remove_all(incoming, ignored);
  ::mkdir(incoming.c_str(), 0700);
  accept_thread_ = std::thread([this] { accept_loop(); });
  send_thread_ = std::thread([this] { send_loop(); });
}

Replicator::Opening::Opening(Replicator& r) : r_(r) {
  std::lock_guard<std::mutex> lock(r_.mutex_);
  if (r_.stopping_) cancel_.cancel();
  r_.cancellers_.insert(&cancel_);
}

Replicator::Opening::~Opening() {
  std::lock_guard<std::mutex> lock(r_.mutex_);
  r_.cancellers_.erase(&cancel_);
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (ReplicaLink* link : open_links_) link->shutdown();
    for (LinkCanceller* opening : cancellers_) opening->cancel();  // a handshake or connect under way
  }
  changed_cv_.notify_all();
  (void)!::write(wake_[1], "x", 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (send_thread_.joinable()) send_thread_.join();
  for (std::thread& t : restore_threads_) t.join();
  std::map<std::thread::id, std::thread> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(connections_);
  }
  for (auto& [id, thread] : left) thread.join();
  std::error_code ignored;
  std::filesystem::remove_all(settings_.folder + "/" + kIncomingFolder + "/held", ignored);
  ::rmdir((settings_.folder + "/" + kIncomingFolder).c_str());  // empty now: every copy ended
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void Replicator::changed() { changed_cv_.notify_all(); }

ManifestEntries Replicator::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return manifest_.entries();
}

bool Replicator::wait_until(const Condition& done, double timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_cv_.wait_for(lock, std::chrono::duration<double>(timeout),
                              [&] { return done(manifest_.entries(), announced_); });
}

bool Replicator::wait_sent(double timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_cv_.wait_for(lock, std::chrono::duration<double>(timeout),
                              [&] { return queue_.empty() && !sending_; });
}

void Replicator::committed(const std::string& path) {
  if (!replicable_path(path)) return;
  struct stat st {};
  const std::string full = settings_.folder + "/" + path;
  if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = placed_.find(path); it != placed_.end()) {
    const bool ours = it->second == static_cast<unsigned long>(st.st_ino);
    placed_.erase(it);
    if (ours) return;  // the copy this replicator renamed into place
  }
  const ManifestEntry& entry = manifest_.commit(path, static_cast<std::uint64_t>(st.st_size));
  queue_own(path, entry);
  changed();
}

void Replicator::removed(const std::string& path) {
  if (!replicable_path(path)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = unlinking_.find(path); it != unlinking_.end()) {
    if (--it->second == 0) unlinking_.erase(it);
    return;
  }
  const ManifestEntry* held = manifest_.find(path);
  if (held == nullptr || held->removed) return;
  const ManifestEntry& entry = manifest_.remove(path);
  queue_own(path, entry);
  changed();
}

void Replicator::missing(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  manifest_.forget(path);
  changed();
}

void Replicator::start_round(int round, std::vector<ReplicaPeer> ring, std::function<void(RestoreOutcome)> restored) {
  // Nodes on one machine whose folders are one (no mount namespace of their own): each already
  // sees what the others commit, and a copy would be written over its own source.
  if (const std::string shared = shared_folder(ring); !shared.empty()) {
    RestoreOutcome outcome;
    if (!std::exchange(said_shared_, true)) {
      outcome.lines.push_back(fmt::format(
          "snapshots: not copied between the nodes of round {}: nodes {} share one snapshot folder (one machine)", round,
          shared));
    }
    ring.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    round_ = round;
    ring_.clear();
    by_slot_ = false;
    ++restores_;
    ++round_changes_;
    changed();
    restored(std::move(outcome));
    return;
  }
  std::uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = ++restores_;
    if (!ring_.empty()) {
      round_before_ = round_;
      ring_before_.clear();
      for (const ReplicaPeer& peer : ring_) ring_before_.push_back(peer.node);
    }
    round_ = round;
    ring_ = ring;
    self_ = 0;
    for (std::size_t i = 0; i < ring_.size(); ++i) {
      if (ring_[i].node == node_) self_ = i;
    }
    enter_slot(round);
    ++round_changes_;
    changed();
  }
  restore_threads_.push_back(std::thread(
      [this, generation, round, ring = std::move(ring), restored = std::move(restored)]() mutable {
        restore(generation, round, std::move(ring), std::move(restored));
      }));
}

// ---- sending ---------------------------------------------------------------------------------

void Replicator::send_loop() {
  std::optional<ReplicaLink> link;
  std::uint64_t link_changes = 0;
  for (;;) {
    OutItem item;
    ReplicaPeer next;
    int round = -1;
    std::uint64_t changes = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && ring_.size() > 1); });
      if (stopping_) return;
      item = queue_.front();
      queue_.pop_front();
      sending_ = true;
      next = ring_[(self_ + 1) % ring_.size()];
      round = round_;
      changes = round_changes_;
    }
    try {
      if (!link || link_changes != changes) {
        link.reset();
        Opening opening(*this);
        link.emplace(ReplicaLink::connect(next.addr, next.port, settings_.auth,
                                          {{"type", "intro"}, {"purpose", "push"}, {"round", round}, {"node", node_}},
                                          settings_.timeout, opening.get()));
        {
          std::lock_guard<std::mutex> lock(mutex_);
          open_links_.insert(&*link);
        }
        const nlohmann::json answer = link->receive(settings_.timeout);
        if (answer.value("type", "") != "ready") {
          throw LinkError(fmt::format("{} refused the copies: {}", next.node, answer.value("why", "")));
        }
        link_changes = changes;
      }
      send_item(*link, item);
      if (link->receive(settings_.timeout).value("type", "") != "stored") {
        throw LinkError(fmt::format("{} did not say it stored {}", next.node, item.path));
      }
      std::lock_guard<std::mutex> lock(mutex_);
      sending_ = false;
      changed();
    } catch (const LinkError& e) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (link) open_links_.erase(&*link);
        sending_ = false;
        if (stopping_) return;
        // Again, to the successor of the next round if this one changes it; a copy whose source
        // was cut is dropped (its own sender retries).
        if (!item.source || !item.source->cut) queue_.push_front(item);
        changed();
      }
      link.reset();
      std::unique_lock<std::mutex> lock(mutex_);
      changed_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || round_changes_ != changes; });
    }
  }
}

std::unique_ptr<SnapshotReplication> make_snapshot_replication(const std::string& folder, const ReplicationAuth& auth,
                                                               int replicas, SnapshotReplication::Say say) {
  NodeAuth links;
  if (auth.munge_scope.empty()) {
    links.secret = auth.secret;
  } else {
    links.munge = std::make_shared<MungeKeyExchange>(open_munge(auth.munge_socket), auth.munge_scope, ::getuid());
  }
  Replicator::Settings settings{folder, "", std::move(links)};
  settings.replicas = replicas;
  return std::make_unique<Replicator>(std::move(settings), std::move(say));
}

}  // namespace ddprun::elastic
