// A Comm over a c10d process group (gloo or NCCL): the collectives, the error wrapping and
// the "unusable after the first failure" rule, shared by both backends. A backend supplies
// the process group and how to wait for one of its operations.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <vector>
#include <string>

#include "ddprun/comm.hpp"
#include "compat.hpp"

namespace ddprun::detail {

class C10dComm : public Comm, public std::enable_shared_from_this<C10dComm> {
 public:
  // `check_collectives`: whether check_agreement() exchanges the calls (see Comm).
  C10dComm(c10::intrusive_ptr<compat::ProcessGroupBase> pg, int rank, int size, c10::Device device,
           std::chrono::milliseconds timeout, std::string backend, bool check_collectives);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }
  c10::Device device() const override { return device_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::unique_ptr<PendingOp> start_all_reduce(at::Tensor flat, ReduceOp op) override;
  void broadcast(at::Tensor flat, int root) override;
  std::vector<at::Tensor> all_gather(const at::Tensor& flat) override;
  void barrier() override;
  void check_agreement(const CollectiveCall& call) override;
  bool healthy() const override { return healthy_.load(); }

  // Throws CommError if an earlier collective failed. `op` names the refused one.
  void check_healthy(const char* op) const;
  // Waits for `work`, started at `started` by the collective `op`; on failure marks this
  // communicator unhealthy and throws CommError naming `op` and the timeout. `block_cpu`: the
  // caller reads the result on the CPU next (see wait_work).
  void finish(const char* op, c10d::Work& work, std::chrono::steady_clock::time_point started,
              bool block_cpu);
  // Marks this communicator unhealthy (keeping the first failure's message) and throws
  // CommError(message).
  [[noreturn]] void give_up(const std::string& message);
  // all_gather(), with failures reported as failures of `op`.
  std::vector<at::Tensor> gather(const char* op, const at::Tensor& flat);
  // Turns an exception thrown by `op` into a CommError and marks this communicator unhealthy.
  [[noreturn]] void fail(const char* op, const std::exception& error,
                         std::chrono::steady_clock::time_point started);

 protected:
  // Returns once `work` has completed on this rank, or throws what the backend reports. On a
  // GPU without `block_cpu`, it may instead order the current stream after the work (the
  // result is then read by later kernels, not by the CPU).
  virtual void wait_work(c10d::Work& work, bool block_cpu) = 0;

  compat::ProcessGroupBase& pg() { return *pg_; }

 private:
  c10::intrusive_ptr<compat::ProcessGroupBase> pg_;
  int rank_;
  int size_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  std::string backend_;
  bool check_collectives_;
  std::atomic<bool> healthy_{true};
  mutable std::mutex mutex_;
  std::string first_error_;
};

// The collective's name in messages (all_reduce, broadcast, ...).
const char* kind_name(CollectiveKind kind);

// The message of a failed collective: which operation, which rank, how long it ran, the
// timeout and its knob, and the backend's own words. `timed_out` selects the wording for a
// hung peer over the one for a dead peer.
std::string describe_comm_failure(const char* op, int rank, int size, bool timed_out,
                                  double elapsed_s, std::chrono::milliseconds timeout,
                                  const std::string& backend_message);

// The message when ranks disagree on a collective: each distinct call with the ranks that made
// it, or nothing when every call in `calls` (indexed by rank) is the same.
std::optional<std::string> describe_disagreement(const std::vector<CollectiveCall>& calls);

// Whether a backend error means "a peer did not answer in time" rather than "a peer died".
bool looks_like_timeout(const std::string& backend_message, double elapsed_s,
                        std::chrono::milliseconds timeout);

}  // namespace ddprun::detail
