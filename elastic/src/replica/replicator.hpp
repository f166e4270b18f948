// A node's snapshot replicator: keeps this node's snapshot folder (DDPRUN_SNAPSHOT_DIR) holding
// every file committed on any node of the round, at the same path. The design (one folder for
// the job, Lamport-stamped versions, a ring, the restore before a round's workers start) is in
// README.md; the wire is link.hpp's; the decisions are manifest.hpp's.
//
// Threads of its own, never the launcher's loop (a gigabyte must not hold up a console line):
// one accepts connections and gives each a thread (a predecessor's push, a peer's manifest or
// fetch); one sends this node's commits, and the copies it forwards, to its successor; one
// restores at a round's start. Received bytes go to `.ddprun-incoming/` in the folder and are
// forwarded from there as they land, so that a node never waits on its successor to read from
// its predecessor (a ring of nodes each waiting on the next cannot form).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/snapshot_replication.hpp"
#include "auth/munge_auth.hpp"
#include "replica/link.hpp"
#include "replica/manifest.hpp"

namespace ddprun::elastic {

class ReplicaLink;

using ReplicaPeer = SnapshotPeer;

// Whether `path` may name a file of the folder: relative, no "." or ".." or empty component,
// not in kIncomingFolder.
bool replicable_path(const std::string& path);

// What tells one snapshot folder from another, whatever machine or mount namespace: the boot's id,
// the folder's device and inode, hashed (16 hex digits). A replicator's node id starts with it.
std::string folder_identity(const std::string& folder);
// Two members of `ring` whose node ids say they have one folder ("a and b"); "" when none do.
std::string shared_folder(const std::vector<SnapshotPeer>& ring);

class Replicator final : public SnapshotReplication {
 public:
  struct Settings {
    std::string folder;       // the snapshot folder (it exists)
    std::string listen_addr;  // where it listens, on a free port; "": every address of the node
    NodeAuth auth;            // every link authenticates with it (MUNGE, else the job's secret)
    double timeout = 10;      // a peer silent this long mid-copy, or a connection this slow, fails
    std::size_t chunk = 1u << 20;
    int replicas = 0;         // --snapshot_replicas: 0, all; K: held by the K next nodes (slots.hpp)
  };
  using Say = std::function<void(const std::string& line)>;  // called on the replicator's threads

  // Listens; throws std::runtime_error when it cannot.
  Replicator(Settings settings, Say say);
  ~Replicator() override;
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  int port() const override { return port_; }
  const std::string& node() const override { return node_; }

  // A round starts: its members in ring (group-rank) order, this node among them. Pushes go to
  // the new successor from now on and are taken only from the new predecessor; then every other
  // member's manifest is read and what this node lacks is fetched: `restored` is called (on the
  // restore thread) when this node holds the newest whole version of every path any member
  // holds. Returns at once.
  void start_round(int round, std::vector<ReplicaPeer> ring, std::function<void(RestoreOutcome)> restored) override;
  // A file of the folder committed (closed or renamed into place by a worker) or removed here.
  // Ignored for what this replicator itself put in place or removed.
  void committed(const std::string& path) override;
  void removed(const std::string& path) override;
  void missing(const std::string& path) override;

  ManifestEntries entries() const;
  // Waits until `done(entries, announced)` holds, at most `timeout` seconds; whether it did.
  // `announced`: the versions whose copy began here and was cut by its sender's loss.
  using Condition = std::function<bool(const ManifestEntries&, const std::map<std::string, Version>& announced)>;
  bool wait_until(const Condition& done, double timeout) const;
  // The copies held for other slots (group ranks), not shown in the folder (--snapshot_replicas=K).
  std::map<int, ManifestEntries> held() const;
  using HeldCondition = std::function<bool(const std::map<int, ManifestEntries>& held)>;
  bool wait_held(const HeldCondition& done, double timeout) const;
  // Waits until every commit queued here has been sent to the successor, at most `timeout`.
  bool wait_sent(double timeout) const;

 private:
  // A copy being received, as the thread that forwards it reads it: the bytes land in `fd`.
  struct Incoming {
    int fd = -1;
    std::uint64_t size = 0;
    std::uint64_t written = 0;
    bool ended = false;  // whole: forward "end"
    bool cut = false;    // given up: forward "cut"
    bool lost = false;   // cut by the loss of the link it came on: the copy is lost, not replaced
    std::mutex mutex;
    std::condition_variable cv;
    ~Incoming();
  };
  struct OutItem {
    std::string path;
    ManifestEntry entry;
    std::shared_ptr<Incoming> source;  // a copy being forwarded; null: this node's own file
    int slot = -1;                     // K: the slot whose copy it is (-1: all, shown everywhere)
    int hops = 0;                      // K: the nodes it is still to reach, this one's successor first
    bool held = false;                 // the bytes are this node's held copy of `slot`'s
  };
  // A LinkCanceller registered while a link opens: stopping cuts its handshake.
  class Opening {
   public:
    explicit Opening(Replicator& r);
    ~Opening();
    LinkCanceller* get() { return &cancel_; }

   private:
    Replicator& r_;
    LinkCanceller cancel_;
  };

  void accept_loop();
  void serve(int fd);
  void serve_push(ReplicaLink& link, const std::string& from, int round);
  void serve_manifest(ReplicaLink& link);
  void serve_fetch(ReplicaLink& link);
  // Receives one copy whose header is `header`; forwards it when `forward`. Returns whether it
  // was put in place.
  bool receive_copy(ReplicaLink& link, const nlohmann::json& header, bool forward, std::uint64_t* bytes);
  void send_loop();
  void send_item(ReplicaLink& link, const OutItem& item);
  void send_file(ReplicaLink& link, const std::string& path, const ManifestEntry& entry, const OutItem* item = nullptr);
  // Under mutex_: where the held copy of `path` for `slot` lies; the folder's files move there when
  // this node leaves `slot` (K); what this node tells of itself at a round's start.
  std::string held_path(int slot, const std::string& path) const;
  void leave_slot(int slot);
  void enter_slot(int round);
  nlohmann::json report() const;
  // Under mutex_: a copy of this node's folder queued for its successor (K: held for its slot).
  void queue_own(const std::string& path, const ManifestEntry& entry);
  void restore(std::uint64_t generation, int round, std::vector<ReplicaPeer> ring,
               std::function<void(RestoreOutcome)> restored);
  bool restore_current(std::uint64_t generation) const;
  // Under mutex_: a version of `path` this node holds as a copy for another slot (`slot`, or
  // any when -1) renamed into the folder: true when it was.
  bool take_held(const std::string& path, const Version& version, int slot);
  void changed();  // under mutex_: wakes wait_until()

  Settings settings_;
  Say say_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that stops accept_loop
  int port_ = 0;
  std::string node_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_cv_;  // the manifest, the queue or the ring changed
  Manifest manifest_;
  std::map<int, Manifest> held_;               // K: the copies held for other slots
  int slot_ = -1;                               // the group rank whose files the folder shows
  bool by_slot_ = false;                        // this round holds by slot (K below nodes-1)
  bool slot_kept_ = false;                      // and this node runs the group rank it ran before
  int round_before_ = -1;                       // the round before this one, and its ring's nodes
  std::vector<std::string> ring_before_;
  std::map<std::string, Version> announced_;  // copies begun and cut
  std::map<std::string, unsigned long> placed_;  // path -> inode this replicator put there
  std::map<std::string, int> unlinking_;         // paths this replicator removed, not yet seen
  std::deque<OutItem> queue_;
  bool sending_ = false;
  int round_ = -1;
  std::vector<ReplicaPeer> ring_;
  std::size_t self_ = 0;
  std::uint64_t round_changes_ = 0;
  std::uint64_t incoming_count_ = 0;
  bool stopping_ = false;
  bool said_shared_ = false;
  std::map<std::thread::id, std::thread> connections_;  // serve()'s threads
  std::vector<std::thread::id> finished_;                // those that ended, to join
  std::set<ReplicaLink*> open_links_;                    // shut down when stopping
  std::set<LinkCanceller*> cancellers_;                  // links opening: cut when stopping
  std::thread accept_thread_;
  std::thread send_thread_;
  std::vector<std::thread> restore_threads_;  // one a round; a round's start never waits for the last's
  std::uint64_t restores_ = 0;               // start_round() calls: an older restore stops early
};

}  // namespace ddprun::elastic
