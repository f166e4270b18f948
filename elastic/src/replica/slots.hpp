// The decisions of --snapshot_replicas=K (README.md, "K replicas"): a file committed on a node is
// held by the K next nodes of the ring, not shown in their folders; the folder of a group rank
// (a "slot") goes on whichever node runs that rank, restored from the slot's holders. Pure, tested
// as tables (tests/elastic/replica_slots_test.cpp).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "replica/manifest.hpp"

namespace ddprun::elastic {

// Whether a round of `ring_size` nodes holds each file by slot on the K next nodes (true), or
// copies it to every node's folder: `replicas` 0 (all) or K of ring_size-1 or more.
bool holds_by_slot(int replicas, std::size_t ring_size);

// The ring indexes of the nodes that hold the copies of the node at index `self`: its K next.
std::vector<std::size_t> holders_of(std::size_t ring_size, std::size_t self, int replicas);

// What a member told of itself at a round's start (its manifest message).
struct SlotReport {
  std::string node;
  int slot = -1;                          // the group rank whose files its folder shows; -1: none
  ManifestEntries shown;                  // its folder's
  std::map<int, ManifestEntries> held;    // the copies it holds for other slots (a key: it holds for that slot)
  int round_before = -1;                  // the last round it was in before this one, and that round's
  std::vector<std::string> ring_before;   // ring (node ids in group-rank order); -1, empty: none
};

// What `report` holds of slot `slot`'s folder, newest per path (its folder's when it shows that
// slot, its held copies); `any`: whether it holds anything for that slot, even nothing (a key).
ManifestEntries slot_entries(const SlotReport& report, int slot, bool* any = nullptr);

// Every version a member holds, its folder's and its held copies', newest per path: what the
// restore of `all` takes from it (held copies are left when a round of K becomes one of all).
ManifestEntries all_entries(const SlotReport& report);

// The previous round's ring, as the report with the newest round_before tells it.
std::vector<std::string> previous_ring(const std::vector<SlotReport>& reports);

// The members as restore sources for `slot`: who holds what of its folder, in the order given.
std::vector<PeerManifest> slot_sources(const std::vector<SlotReport>& peers, int slot);

// Whether slot `slot`'s folder is lost: it was a slot of the previous round (`previous_size`
// nodes) and no member (this node's own report among `reports`) holds anything for it.
bool slot_lost(const std::vector<SlotReport>& reports, int slot, std::size_t previous_size);

// Of the slots a node holds copies for, those no rank maps to in a round of `ring_size` nodes
// (a shrink): dropped, with a line.
std::vector<int> dropped_slots(const std::map<int, ManifestEntries>& held, std::size_t ring_size);

// What the holders of `slot` (the K next nodes' reports; a holder that did not report: absent)
// lack of `shown`, the slot's folder: pushed to them after the restore. A holder that did not
// report lacks everything.
ManifestEntries missing_at_holders(const ManifestEntries& shown, int slot, const std::vector<const SlotReport*>& holders);

}  // namespace ddprun::elastic
