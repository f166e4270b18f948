#include "replica/manifest.hpp"

#include <algorithm>
#include <utility>

namespace ddprun::elastic {

void to_json(nlohmann::json& j, const Version& v) { j = {{"clock", v.clock}, {"origin", v.origin}}; }
void from_json(const nlohmann::json& j, Version& v) {
  j.at("clock").get_to(v.clock);
  j.at("origin").get_to(v.origin);
}
void to_json(nlohmann::json& j, const ManifestEntry& e) {
  j = {{"version", e.version}, {"size", e.size}, {"removed", e.removed}};
}
void from_json(const nlohmann::json& j, ManifestEntry& e) {
  j.at("version").get_to(e.version);
  j.at("size").get_to(e.size);
  j.at("removed").get_to(e.removed);
}


const ManifestEntry* Manifest::find(const std::string& path) const {
  const auto it = entries_.find(path);
  return it == entries_.end() ? nullptr : &it->second;
}

const ManifestEntry& Manifest::commit(const std::string& path, std::uint64_t size) {
  ManifestEntry& entry = entries_[path];
  entry = ManifestEntry{Version{++clock_, node_}, size, false};
  return entry;
}

const ManifestEntry& Manifest::remove(const std::string& path) {
  ManifestEntry& entry = entries_[path];
  entry = ManifestEntry{Version{++clock_, node_}, 0, true};
  return entry;
}

bool Manifest::receive(const std::string& path, const ManifestEntry& entry) {
  clock_ = std::max(clock_, entry.version.clock);
  const auto it = entries_.find(path);
  if (it != entries_.end() && !(it->second.version < entry.version)) return false;
  entries_[path] = entry;
  return true;
}

namespace {

// Per path: the newest version held whole by any node, and by whom first.
struct Newest {
  ManifestEntry entry;
  std::string holder;  // "": this node
  bool any = false;
};

void consider(Newest& newest, const ManifestEntry& entry, const std::string& holder) {
  if (!newest.any || newest.entry.version < entry.version) {
    newest = Newest{entry, holder, true};
  }
}

}  // namespace

RestorePlan plan_restore(const Manifest& local, const std::vector<PeerManifest>& peers,
                         const std::map<std::string, Version>& announced) {
  std::map<std::string, Newest> newest;
  for (const auto& [path, entry] : local.entries()) consider(newest[path], entry, "");
  for (const PeerManifest& peer : peers) {
    for (const auto& [path, entry] : peer.entries) consider(newest[path], entry, peer.node);
  }

  // Per path: the newest version some node saw begin and not end.
  std::map<std::string, Version> cut = announced;
  for (const PeerManifest& peer : peers) {
    for (const auto& [path, version] : peer.announced) {
      auto [it, added] = cut.emplace(path, version);
      if (!added && it->second < version) it->second = version;
    }
  }

  RestorePlan plan;
  for (const auto& [path, best] : newest) {
    const ManifestEntry* held = local.find(path);
    const bool current = held && held->version == best.entry.version;
    if (!current) {
      if (best.entry.removed) {
        plan.remove.push_back(RestoreRemove{path, best.entry});
      } else {
        plan.fetch.push_back(RestoreFetch{path, best.entry, best.holder});
      }
    }
  }
  for (const auto& [path, version] : cut) {
    const auto it = newest.find(path);
    if (it != newest.end() && !(it->second.entry.version < version)) continue;  // held whole, or superseded
    ManifestEntry kept;
    if (it != newest.end() && !it->second.entry.removed) kept = it->second.entry;
    plan.lost.push_back(RestoreLost{path, version, kept});
  }
  return plan;
}

}  // namespace ddprun::elastic
