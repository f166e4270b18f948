#include "replica/slots.hpp"

#include <algorithm>

namespace ddprun::elastic {

namespace {

void merge_newest(ManifestEntries& into, const ManifestEntries& from) {
  for (const auto& [path, entry] : from) {
    auto [it, added] = into.emplace(path, entry);
    if (!added && it->second.version < entry.version) it->second = entry;
  }
}

}  // namespace

bool holds_by_slot(int replicas, std::size_t ring_size) {
  return replicas > 0 && ring_size > 1 && static_cast<std::size_t>(replicas) < ring_size - 1;
}

std::vector<std::size_t> holders_of(std::size_t ring_size, std::size_t self, int replicas) {
  std::vector<std::size_t> holders;
  if (ring_size < 2) return holders;
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(std::max(replicas, 0)), ring_size - 1);
  for (std::size_t d = 1; d <= k; ++d) holders.push_back((self + d) % ring_size);
  return holders;
}

ManifestEntries slot_entries(const SlotReport& report, int slot, bool* any) {
  ManifestEntries entries;
  bool holds = false;
  if (report.slot == slot) {
    entries = report.shown;
    holds = true;
  }
  if (const auto it = report.held.find(slot); it != report.held.end()) {
    merge_newest(entries, it->second);
    holds = true;
  }
  if (any != nullptr) *any = holds;
  return entries;
}

ManifestEntries all_entries(const SlotReport& report) {
  ManifestEntries entries = report.shown;
  for (const auto& [slot, held] : report.held) merge_newest(entries, held);
  return entries;
}

std::vector<std::string> previous_ring(const std::vector<SlotReport>& reports) {
  const SlotReport* newest = nullptr;
  for (const SlotReport& r : reports) {
    if (r.round_before >= 0 && (newest == nullptr || newest->round_before < r.round_before)) newest = &r;
  }
  return newest == nullptr ? std::vector<std::string>{} : newest->ring_before;
}

std::vector<PeerManifest> slot_sources(const std::vector<SlotReport>& peers, int slot) {
  std::vector<PeerManifest> sources;
  for (const SlotReport& peer : peers) {
    bool any = false;
    ManifestEntries entries = slot_entries(peer, slot, &any);
    if (any) sources.push_back(PeerManifest{peer.node, std::move(entries), {}});
  }
  return sources;
}

bool slot_lost(const std::vector<SlotReport>& reports, int slot, std::size_t previous_size) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= previous_size) return false;
  return std::none_of(reports.begin(), reports.end(), [&](const SlotReport& r) {
    bool any = false;
    slot_entries(r, slot, &any);
    return any;
  });
}

std::vector<int> dropped_slots(const std::map<int, ManifestEntries>& held, std::size_t ring_size) {
  std::vector<int> dropped;
  for (const auto& [slot, entries] : held) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= ring_size) dropped.push_back(slot);
  }
  return dropped;
}

ManifestEntries missing_at_holders(const ManifestEntries& shown, int slot, const std::vector<const SlotReport*>& holders) {
  ManifestEntries missing;
  for (const SlotReport* holder : holders) {
    const ManifestEntries has = holder == nullptr ? ManifestEntries{} : slot_entries(*holder, slot);
    for (const auto& [path, entry] : shown) {
      const auto it = has.find(path);
      if (it == has.end() || it->second.version < entry.version) missing.emplace(path, entry);
    }
  }
  return missing;
}

}  // namespace ddprun::elastic
