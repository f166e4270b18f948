// The restore before a round's workers start (replicator.hpp): the others' manifests, then what
// this node lacks, fetched; removals applied; lost versions said.
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "replica/link.hpp"
#include "replica/replicator.hpp"

namespace ddprun::elastic {

namespace {

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool Replicator::restore_current(std::uint64_t generation) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation == restores_ && !stopping_;
}

// A restore that a newer round's start overtook stops between two steps, and says nothing: the
// newer one does the work.
void Replicator::restore(std::uint64_t generation, int round, std::vector<ReplicaPeer> ring,
                         std::function<void(RestoreOutcome)> restored) {
  const auto start = std::chrono::steady_clock::now();
  RestoreOutcome outcome;
  std::size_t self = 0;
  for (std::size_t i = 0; i < ring.size(); ++i) {
    if (ring[i].node == node_) self = i;
  }
  // The others' manifests, the predecessor first: it is the first asked for a file.
  std::vector<PeerManifest> peers;
  std::map<std::string, ReplicaPeer> by_node;
  for (std::size_t k = 1; k < ring.size(); ++k) {
    const ReplicaPeer& peer = ring[(self + ring.size() - k) % ring.size()];
    by_node[peer.node] = peer;
    if (!restore_current(generation)) return;
    try {
      ReplicaLink link = ReplicaLink::connect(
          peer.addr, peer.port, settings_.auth,
          {{"type", "intro"}, {"purpose", "manifest"}, {"round", round}, {"node", node_}}, settings_.timeout);
      const nlohmann::json message = link.receive(settings_.timeout);
      peers.push_back(PeerManifest{peer.node, message.at("entries").get<ManifestEntries>(),
                                   message.at("announced").get<std::map<std::string, Version>>()});
    } catch (const std::exception& e) {
      outcome.lines.push_back(fmt::format("snapshots: node {} did not give its list of files: {}", peer.node, e.what()));
    }
  }
  RestorePlan plan;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    plan = plan_restore(manifest_, peers, announced_);
  }
  for (const RestoreFetch& fetch : plan.fetch) {
    const auto peer = by_node.find(fetch.from);
    if (peer == by_node.end()) continue;
    if (!restore_current(generation)) return;
    try {
      ReplicaLink link = ReplicaLink::connect(
          peer->second.addr, peer->second.port, settings_.auth,
          {{"type", "intro"}, {"purpose", "fetch"}, {"round", round}, {"node", node_}}, settings_.timeout);
      link.send({{"type", "fetch"}, {"path", fetch.path}, {"version", fetch.entry.version}});
      const nlohmann::json header = link.receive(settings_.timeout);
      if (header.value("type", "") == "copy" && receive_copy(link, header, false, &outcome.bytes)) ++outcome.fetched;
    } catch (const std::exception& e) {
      outcome.lines.push_back(fmt::format("snapshots: could not fetch {} from {}: {}", fetch.path, fetch.from, e.what()));
    }
  }
  for (const RestoreRemove& remove : plan.remove) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (manifest_.receive(remove.path, remove.entry)) {
      const std::string full = settings_.folder + "/" + remove.path;
      if (::unlink(full.c_str()) == 0) {
        ++unlinking_[remove.path];
        ++outcome.removed;
      }
    }
    changed();
  }
  for (const RestoreLost& lost : plan.lost) {
    outcome.lines.push_back(fmt::format(
        "snapshots: {} as written on {} is lost: its copy was cut when that node went, and no node holds it whole; {}",
        lost.path, lost.version.origin,
        lost.kept.version.origin.empty() ? "the folder has no version of it"
                                         : fmt::format("the folder keeps the version written on {}", lost.kept.version.origin)));
  }
  outcome.seconds = since(start);
  restored(std::move(outcome));
}

}  // namespace ddprun::elastic
