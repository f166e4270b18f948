// The replicated snapshot folder's manifest: which version of each path a node holds, and the
// decisions that follow from manifests: whether a copy received is newer, what a node must fetch
// or remove before a round's workers start, and what no node holds whole any more. Pure: no I/O,
// tested as tables (tests/elastic/replica_manifest_test.cpp). The design: README.md,
// "Replication across nodes".
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

namespace ddprun::elastic {

// A commit's stamp: a Lamport clock and the node that committed it. Totally ordered, the same
// order on every node: the newest stamp of a path wins everywhere.
struct Version {
  std::uint64_t clock = 0;
  std::string origin;  // the committing node's id, unique in the job

  friend bool operator<(const Version& a, const Version& b) {
    return std::tie(a.clock, a.origin) < std::tie(b.clock, b.origin);
  }
  friend bool operator==(const Version& a, const Version& b) {
    return a.clock == b.clock && a.origin == b.origin;
  }
};

// What a node holds of a path: a version whole (its bytes in the folder), or a removal (a
// tombstone: nothing on disk, the stamp kept so that an older copy never brings the file back).
struct ManifestEntry {
  Version version;
  std::uint64_t size = 0;
  bool removed = false;
};

using ManifestEntries = std::map<std::string, ManifestEntry>;

// On the wire (link.hpp): {"clock":C,"origin":O}; {"version":V,"size":S,"removed":B}.
void to_json(nlohmann::json& j, const Version& v);
void from_json(const nlohmann::json& j, Version& v);
void to_json(nlohmann::json& j, const ManifestEntry& e);
void from_json(const nlohmann::json& j, ManifestEntry& e);

// One node's manifest and its clock.
class Manifest {
 public:
  explicit Manifest(std::string node) : node_(std::move(node)) {}

  const std::string& node() const { return node_; }
  std::uint64_t clock() const { return clock_; }
  const ManifestEntries& entries() const { return entries_; }
  // The entry of `path`, or nullptr.
  const ManifestEntry* find(const std::string& path) const;

  // A file committed here (its writer closed or renamed it, commit watch): its new stamp, one
  // past everything this node has committed or received.
  const ManifestEntry& commit(const std::string& path, std::uint64_t size);
  // A committed file removed here.
  const ManifestEntry& remove(const std::string& path);
  // A copy (or a removal) received whole from another node: true when it is newer than what
  // this node holds, and the caller then puts it in place (renames it into the folder, or
  // removes the path); false for a stale or repeated one, which the caller drops. Either way the
  // clock moves past the copy's.
  bool receive(const std::string& path, const ManifestEntry& entry);
  // This node holds no version of `path` any more, and records no removal of it either (its
  // copy went by accident): the next restore takes the newest another node holds.
  void forget(const std::string& path) { entries_.erase(path); }
  // Holds nothing any more (its files went to held copies); the clock stays.
  void clear() { entries_.clear(); }

 private:
  std::string node_;
  std::uint64_t clock_ = 0;
  ManifestEntries entries_;
};

// What a member of the round told of itself when a round starts: its manifest and the versions
// whose copy it saw begin but never received whole (the header of a copy cut by a node's loss).
struct PeerManifest {
  std::string node;
  ManifestEntries entries;
  std::map<std::string, Version> announced;
};

struct RestoreFetch {
  std::string path;
  ManifestEntry entry;
  std::string from;  // the first member in the list given that holds it whole
};

// A version committed somewhere that no member holds whole: its node was lost before every copy
// of it was. `kept` is what the folder holds of the path instead (a null version: nothing).
struct RestoreLost {
  std::string path;
  Version version;
  ManifestEntry kept;
};

// A removal newer than what this node holds of the path: the caller records it (receive) and
// removes the file when there is one.
struct RestoreRemove {
  std::string path;
  ManifestEntry entry;
};

struct RestorePlan {
  std::vector<RestoreFetch> fetch;      // newer whole versions held elsewhere
  std::vector<RestoreRemove> remove;    // removed elsewhere later than the version held here
  std::vector<RestoreLost> lost;        // said in one line each, and in the event log
};

// Before a round's workers start: for every path, the newest version any member holds whole
// (a file or a removal) is what every node must hold. `peers` are the other members, in the
// order to fetch from (the caller puts its ring predecessor first); `announced` this node's own
// cut copies. Paths in lexicographic order in each list.
RestorePlan plan_restore(const Manifest& local, const std::vector<PeerManifest>& peers,
                         const std::map<std::string, Version>& announced);

}  // namespace ddprun::elastic
