// The restore before a round's workers start (replicator.hpp): the others' manifests, then what
// this node lacks, fetched; removals applied; lost versions said. With --snapshot_replicas=K
// (slots.hpp): what its group rank's folder held, from that rank's holders, then pushed to the
// rank's new holders what they lack.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "replica/link.hpp"
#include "replica/replicator.hpp"
#include "replica/slots.hpp"

namespace ddprun::elastic {

namespace {

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A member's manifest message (Replicator::report); a replicator of before K sends only the
// entries and the announced versions.
SlotReport parse_report(const std::string& node, const nlohmann::json& message) {
  SlotReport r;
  r.node = node;
  r.shown = message.at("entries").get<ManifestEntries>();
  r.slot = message.value("slot", -1);
  if (const auto held = message.find("held"); held != message.end()) {
    for (const auto& [slot, entries] : held->items()) r.held[std::stoi(slot)] = entries.get<ManifestEntries>();
  }
  r.round_before = message.value("round_before", -1);
  r.ring_before = message.value("ring_before", std::vector<std::string>{});
  return r;
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
  std::vector<SlotReport> reports;
  std::vector<nlohmann::json> announced;
  std::map<std::string, ReplicaPeer> by_node;
  for (std::size_t k = 1; k < ring.size(); ++k) {
    const ReplicaPeer& peer = ring[(self + ring.size() - k) % ring.size()];
    by_node[peer.node] = peer;
    if (!restore_current(generation)) return;
    try {
      Opening opening(*this);
      ReplicaLink link = ReplicaLink::connect(
          peer.addr, peer.port, settings_.auth,
          {{"type", "intro"}, {"purpose", "manifest"}, {"round", round}, {"node", node_}}, settings_.timeout,
          opening.get());
      const nlohmann::json message = link.receive(settings_.timeout);
      reports.push_back(parse_report(peer.node, message));
      announced.push_back(message.at("announced"));
    } catch (const std::exception& e) {
      outcome.lines.push_back(fmt::format("snapshots: node {} did not give its list of files: {}", peer.node, e.what()));
    }
  }
  RestorePlan plan;
  bool by_slot = false;
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    by_slot = by_slot_;
    slot = slot_;
    if (!by_slot) {
      // All: the newest whole version of every path any member holds, its folder's or a copy it
      // holds for a slot (a round of K before this one).
      std::vector<PeerManifest> peers;
      for (std::size_t i = 0; i < reports.size(); ++i) {
        peers.push_back(PeerManifest{reports[i].node, all_entries(reports[i]),
                                     announced[i].get<std::map<std::string, Version>>()});
      }
      SlotReport own;
      for (const auto& [s, held] : held_) own.held[s] = held.entries();
      if (!own.held.empty()) peers.insert(peers.begin(), PeerManifest{node_, all_entries(own), {}});
      plan = plan_restore(manifest_, peers, announced_);
    } else {
      // K: what this node's group rank's folder held, from whoever holds it.
      SlotReport own;
      own.node = node_;
      own.slot = slot_kept_ ? slot_ : -1;
      own.shown = manifest_.entries();
      for (const auto& [s, held] : held_) own.held[s] = held.entries();
      own.round_before = round_before_;
      own.ring_before = ring_before_;
      std::vector<SlotReport> all = reports;
      all.push_back(own);
      const std::vector<std::string> before = previous_ring(all);
      const bool ours_before = static_cast<std::size_t>(slot) < before.size() && before[slot] == node_;
      if (slot_lost(all, slot, before.size())) {
        outcome.lines.push_back(fmt::format(
            "snapshots: no node holds the files of group rank {} (node {} in the round before): that node and the "
            "{} holding its copies are gone, and what they held with them; this node's folder starts without it",
            slot, before[slot], settings_.replicas == 1 ? "node" : fmt::format("{} nodes", settings_.replicas)));
      } else if (!ours_before && static_cast<std::size_t>(slot) < before.size()) {
        outcome.lines.push_back(fmt::format(
            "snapshots: this node runs group rank {} from round {} on, node {}'s before: its folder shows that "
            "node's files",
            slot, round, before[slot]));
      }
      std::vector<PeerManifest> sources = slot_sources(reports, slot);
      if (const auto it = held_.find(slot); it != held_.end()) {
        sources.insert(sources.begin(), PeerManifest{node_, it->second.entries(), {}});
      }
      plan = plan_restore(manifest_, sources, {});
    }
  }
  for (const RestoreFetch& fetch : plan.fetch) {
    if (!restore_current(generation)) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (take_held(fetch.path, fetch.entry.version, by_slot ? slot : -1)) {
        ++outcome.fetched;
        continue;
      }
    }
    // From the first member that holds it, then from the others that do.
    std::vector<std::string> from = {fetch.from};
    for (const SlotReport& r : reports) {
      const ManifestEntries entries = by_slot ? slot_entries(r, slot) : all_entries(r);
      const auto it = entries.find(fetch.path);
      if (r.node != fetch.from && it != entries.end() && it->second.version == fetch.entry.version) from.push_back(r.node);
    }
    std::string failed;
    bool done = false;
    for (const std::string& node : from) {
      const auto peer = by_node.find(node);
      if (peer == by_node.end() || done) continue;
      try {
        Opening opening(*this);
        ReplicaLink link = ReplicaLink::connect(
            peer->second.addr, peer->second.port, settings_.auth,
            {{"type", "intro"}, {"purpose", "fetch"}, {"round", round}, {"node", node_}}, settings_.timeout,
            opening.get());
        nlohmann::json request = {{"type", "fetch"}, {"path", fetch.path}, {"version", fetch.entry.version}};
        if (by_slot) request["slot"] = slot;
        link.send(request);
        const nlohmann::json header = link.receive(settings_.timeout);
        if (header.value("type", "") != "copy") {
          failed = fmt::format("from {}: it no longer holds it", node);
          continue;
        }
        done = true;
        if (receive_copy(link, header, false, &outcome.bytes)) ++outcome.fetched;
      } catch (const std::exception& e) {
        failed = fmt::format("from {}: {}", node, e.what());
      }
    }
    if (!done && !failed.empty()) outcome.lines.push_back(fmt::format("snapshots: could not fetch {} {}", fetch.path, failed));
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
  if (by_slot) {
    // K: the rank's holders in this round (its K next nodes) get what they lack of its folder.
    std::vector<const SlotReport*> holders;
    for (const std::size_t holder : holders_of(ring.size(), self, settings_.replicas)) {
      const std::string& node = ring[holder].node;
      const auto it = std::find_if(reports.begin(), reports.end(), [&](const SlotReport& r) { return r.node == node; });
      holders.push_back(it == reports.end() ? nullptr : &*it);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation == restores_) {
      for (const auto& [path, entry] : missing_at_holders(manifest_.entries(), slot, holders)) queue_own(path, entry);
      changed();
    }
  }
  outcome.seconds = since(start);
  restored(std::move(outcome));
}

}  // namespace ddprun::elastic
