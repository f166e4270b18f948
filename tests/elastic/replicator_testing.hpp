// Real replicators on loopback, in one process, each with a folder of its own (so that only the
// links carry a file from one to another): the helpers of replicator_test.cpp and
// replicator_slots_test.cpp.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "replica/replicator.hpp"

namespace replicator_testing {

using namespace ddprun::elastic;
namespace fs = std::filesystem;

inline constexpr double kWait = 60;  // generous: a loaded 2-core machine; every wait ends on an event

struct Folder {
  std::string path;
  Folder() {
    char name[] = "/tmp/replicator_test.XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  ~Folder() { fs::remove_all(path); }
};

// The lines a replicator said, to wait on.
struct Lines {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> lines;
  Replicator::Say say() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
      cv.notify_all();
    };
  }
  bool wait_for(const std::string& part) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, std::chrono::duration<double>(kWait), [&] {
      for (const auto& l : lines) if (l.find(part) != std::string::npos) return true;
      return false;
    });
  }
};

struct Node {
  Folder folder;
  Lines lines;
  std::unique_ptr<Replicator> replicator;
  // `replicas`: --snapshot_replicas (0: all).
  explicit Node(const std::string& secret = "s3cret", int replicas = 0) : Node(NodeAuth{secret, nullptr}, replicas) {}
  explicit Node(NodeAuth auth, int replicas = 0) {
    Replicator::Settings settings{folder.path, "127.0.0.1", std::move(auth), 20, 4096};
    settings.replicas = replicas;
    replicator = std::make_unique<Replicator>(std::move(settings), lines.say());
  }
  ReplicaPeer peer() const { return {replicator->node(), "127.0.0.1", replicator->port()}; }
  void write(const std::string& path, const std::string& bytes) {
    const fs::path full = fs::path(folder.path) / path;
    fs::create_directories(full.parent_path());
    std::ofstream(full.string() + ".tmp", std::ios::binary) << bytes;
    fs::rename(full.string() + ".tmp", full);
    replicator->committed(path);
  }
  std::string read(const std::string& path) const {
    std::ifstream in(fs::path(folder.path) / path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  bool has(const std::string& path) const { return fs::exists(fs::path(folder.path) / path); }
  // Waits until this node holds `path` as `origin` committed it (or its removal).
  bool holds(const std::string& path, const std::string& origin, bool removed = false) {
    return replicator->wait_until(
        [&](const ManifestEntries& e, const std::map<std::string, Version>&) {
          const auto it = e.find(path);
          return it != e.end() && it->second.version.origin == origin && it->second.removed == removed;
        },
        kWait);
  }
};

// Starts round `round` on every node of `ring`, and waits for every restore.
inline std::vector<RestoreOutcome> start_round(int round, const std::vector<Node*>& ring) {
  std::vector<ReplicaPeer> peers;
  for (Node* n : ring) peers.push_back(n->peer());
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<RestoreOutcome> outcomes(ring.size());
  std::size_t done = 0;
  for (std::size_t i = 0; i < ring.size(); ++i) {
    ring[i]->replicator->start_round(round, peers, [&, i](RestoreOutcome outcome) {
      std::lock_guard<std::mutex> lock(mutex);
      outcomes[i] = std::move(outcome);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(cv.wait_for(lock, std::chrono::duration<double>(kWait), [&] { return done == ring.size(); }));
  return outcomes;
}

inline std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

}  // namespace replicator_testing

using namespace replicator_testing;
using namespace ddprun::elastic;
namespace fs = std::filesystem;
