// The replicator's side of --snapshot_replicas=K (slots.hpp: the decisions): copies held for
// other slots, under `.ddprun-incoming/held/SLOT/` in the folder, never shown there; the folder's
// files moved to held copies when this node leaves its group rank, and a held copy moved into the
// folder when it takes one over; what this node tells of itself at a round's start.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "replica/replicator.hpp"
#include "replica/slots.hpp"

namespace ddprun::elastic {

std::map<int, ManifestEntries> Replicator::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<int, ManifestEntries> held;
  for (const auto& [slot, manifest] : held_) held[slot] = manifest.entries();
  return held;
}

bool Replicator::wait_held(const HeldCondition& done, double timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_cv_.wait_for(lock, std::chrono::duration<double>(timeout), [&] {
    std::map<int, ManifestEntries> held;
    for (const auto& [slot, manifest] : held_) held[slot] = manifest.entries();
    return done(held);
  });
}

std::string Replicator::held_path(int slot, const std::string& path) const {
  return fmt::format("{}/{}/held/{}/{}", settings_.folder, kIncomingFolder, slot, path);
}

void Replicator::queue_own(const std::string& path, const ManifestEntry& entry) {
  // Without a ring (one node, a round not replicated) only the manifest: a later round's restore
  // takes what the others lack from it.
  if (ring_.size() < 2) return;
  OutItem item{path, entry, nullptr};
  if (by_slot_) {
    item.slot = slot_;
    item.hops = settings_.replicas;
  }
  queue_.push_back(std::move(item));
}

// This node runs another group rank from this round on (K): its folder's files become held
// copies of its old slot (renamed, nothing copied; still served to whoever takes that slot), and
// the restore fills the folder with its new slot's.
void Replicator::leave_slot(int slot) {
  // Its commits not sent yet: their paths are the new slot's from now on (the new owner of the old
  // slot pushes what its holders lack).
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [&](const OutItem& item) { return !item.source && !item.held && item.slot == slot; }),
               queue_.end());
  Manifest& held = held_.try_emplace(slot, Manifest("")).first->second;
  for (const auto& [path, entry] : manifest_.entries()) {
    if (!entry.removed) {
      const std::string to = held_path(slot, path);
      const std::string from = settings_.folder + "/" + path;
      std::error_code error;
      std::filesystem::create_directories(std::filesystem::path(to).parent_path(), error);
      if (::rename(from.c_str(), to.c_str()) != 0) continue;  // gone: nothing to hold
      ++unlinking_[path];  // the commit watch sees it go: not a removal of the job's
    }
    held.receive(path, entry);
  }
  manifest_.clear();
}

nlohmann::json Replicator::report() const {
  nlohmann::json held = nlohmann::json::object();
  for (const auto& [slot, manifest] : held_) held[std::to_string(slot)] = manifest.entries();
  return {{"type", "manifest"},     {"entries", manifest_.entries()}, {"announced", announced_},
          {"slot", slot_},          {"held", held},                  {"round_before", round_before_},
          {"ring_before", ring_before_}};
}

bool Replicator::take_held(const std::string& path, const Version& version, int slot) {
  for (auto& [s, held] : held_) {
    const ManifestEntry* entry = held.find(path);
    if ((slot >= 0 && s != slot) || entry == nullptr || entry->removed || !(entry->version == version)) continue;
    const std::string from = held_path(s, path);
    const std::string to = settings_.folder + "/" + path;
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(to).parent_path(), error);
    struct stat st {};
    if (::rename(from.c_str(), to.c_str()) != 0 || ::stat(to.c_str(), &st) != 0) return false;
    placed_[path] = static_cast<unsigned long>(st.st_ino);
    manifest_.receive(path, *entry);
    held.forget(path);
    changed();
    return true;
  }
  return false;
}

// A round starts (under mutex_, ring_ and self_ set): K or all; the folder shows the files of the
// group rank this node runs; held copies of a rank no node runs any more (a shrink) go.
void Replicator::enter_slot(int round) {
  by_slot_ = holds_by_slot(settings_.replicas, ring_.size());
  const int slot = static_cast<int>(self_);
  slot_kept_ = slot_ == slot;
  if (by_slot_ && slot_ >= 0 && slot_ != slot) leave_slot(slot_);
  slot_ = slot;
  std::map<int, ManifestEntries> held;
  for (const auto& [s, manifest] : held_) held[s] = manifest.entries();
  for (const int s : dropped_slots(held, ring_.size())) {
    std::error_code ignored;
    std::filesystem::remove_all(fmt::format("{}/{}/held/{}", settings_.folder, kIncomingFolder, s), ignored);
    const std::size_t files = std::count_if(held[s].begin(), held[s].end(), [](const auto& e) { return !e.second.removed; });
    say_(fmt::format("snapshots: dropped the {} file{} held for group rank {}{}: round {} has {} nodes, no rank "
                     "maps to it",
                     files, files == 1 ? "" : "s", s,
                     static_cast<std::size_t>(s) < ring_before_.size() ? fmt::format(" (node {})", ring_before_[s]) : "",
                     round, ring_.size()));
    held_.erase(s);
  }
}

}  // namespace ddprun::elastic
