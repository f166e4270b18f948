// Replicator's serving side: the accept loop, one thread per connection, and what each
// connection asks for (a predecessor's push, a peer's manifest, a fetch). The sending side and
// the round's bookkeeping are in replicator.cpp.
#include "replica/replicator.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "replica/link.hpp"

namespace ddprun::elastic {

void Replicator::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      for (const std::thread::id id : finished_) {
        auto it = connections_.find(id);
        if (it != connections_.end()) {
          done.push_back(std::move(it->second));
          connections_.erase(it);
        }
      }
      finished_.clear();
    }
    for (std::thread& t : done) t.join();
    if ((p[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    std::thread thread([this, fd] {
      serve(fd);
      std::lock_guard<std::mutex> lock(mutex_);
      finished_.push_back(std::this_thread::get_id());
    });
    const std::thread::id id = thread.get_id();
    connections_.emplace(id, std::move(thread));
  }
}

void Replicator::serve(int fd) {
  nlohmann::json intro;
  std::optional<ReplicaLink> link;
  try {
    Opening opening(*this);
    link.emplace(ReplicaLink::accept(fd, settings_.auth, settings_.timeout, intro, opening.get()));
  } catch (const LinkError& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    say_(fmt::format("snapshots: refused a connection: {}", e.what()));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    open_links_.insert(&*link);
  }
  try {
    const std::string purpose = intro.value("purpose", "");
    if (purpose == "push") {
      serve_push(*link, intro.at("node").get<std::string>(), intro.at("round").get<int>());
    } else if (purpose == "manifest") {
      serve_manifest(*link);
    } else if (purpose == "fetch") {
      serve_fetch(*link);
    }
  } catch (const LinkError&) {
    // The peer went, or the replicator stops: a copy cut here is in announced_ (receive_copy).
  } catch (const nlohmann::json::exception&) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  open_links_.erase(&*link);
}

void Replicator::serve_push(ReplicaLink& link, const std::string& from, int round) {
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool member = !ring_.empty() && ring_[(self_ + ring_.size() - 1) % ring_.size()].node == from;
    if (round != round_ || !member) {
      // Fenced: a node of another round, or not this node's predecessor (a node lost from the
      // round and still sending): its copies are never taken. A node of the round tries again
      // (this one may not have started the round yet); the others are said.
      refused = fmt::format("not this node's predecessor in round {}", round_);
      const bool in_round = std::any_of(ring_.begin(), ring_.end(), [&](const ReplicaPeer& p) { return p.node == from; });
      if (!in_round && round <= round_) {
        say_(fmt::format("snapshots: refused copies from {} (round {}): not a member of round {}", from, round, round_));
      }
    }
  }
  // Said either way, before any copy: a sender that wrote a copy into a connection closed unread
  // would take it as sent.
  if (!refused.empty()) {
    link.send({{"type", "refused"}, {"why", refused}});
    return;
  }
  link.send({{"type", "ready"}});
  const std::uint64_t changes = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    return round_changes_;
  }();
  for (;;) {
    const nlohmann::json header = link.receive(-1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (round_changes_ != changes) return;  // a new round: this link is fenced off
    }
    if (header.value("type", "") != "copy") throw LinkError("expected a copy");
    receive_copy(link, header, true, nullptr);
    link.send({{"type", "stored"}});  // the sender's copy is done only now
  }
}

void Replicator::serve_manifest(ReplicaLink& link) {
  nlohmann::json message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    message = report();
  }
  link.send(message);
}

void Replicator::serve_fetch(ReplicaLink& link) {
  const nlohmann::json request = link.receive(settings_.timeout);
  const std::string path = request.at("path").get<std::string>();
  const Version wanted = request.at("version").get<Version>();
  const int slot = request.value("slot", -1);  // K: the slot whose copy is asked for; -1: any
  ManifestEntry entry;
  OutItem source;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto has = [&](const ManifestEntry* e) { return e != nullptr && !e->removed && e->version == wanted; };
    bool found = false;
    if ((slot < 0 || slot == slot_) && has(manifest_.find(path))) {
      entry = *manifest_.find(path);
      found = true;
    }
    for (const auto& [s, held] : held_) {
      if (found || (slot >= 0 && s != slot) || !has(held.find(path))) continue;
      entry = *held.find(path);
      source.slot = s;
      source.held = true;
      found = true;
    }
    if (!found) {
      link.send({{"type", "gone"}});
      return;
    }
  }
  send_file(link, path, entry, source.held ? &source : nullptr);
}

}  // namespace ddprun::elastic
