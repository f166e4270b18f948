// Training with uneven inputs (PyTorch's torch.distributed.algorithms.Join): ranks that run out
// of batches early keep answering the collectives of the ranks still training, so the job ends
// without a hang and the model comes out the same on every rank.
//
//   ddprun::DistributedDataParallel ddp(net, comm);
//   {
//     ddprun::Join join({&ddp});                 // PyTorch: with Join([ddp]):
//     for (auto& batch : my_batches) {           // as many or as few as this rank has
//       opt.zero_grad();
//       loss_fn(ddp.forward([&] { return net->forward(batch.x); }), batch.y).backward();
//       opt.step();
//     }
//     join.finish();                             // this rank has joined: shadow the others
//   }
//
// While a rank trains, each forward pass of a joinable (DDP) first tells the others that it
// has not joined (an all-reduce of a count). A rank that reaches finish() all-reduces zeros in
// their place, and for every iteration that some rank still runs it repeats that iteration's
// collectives with nothing to contribute (JoinHook::main_hook): DDP all-reduces zero gradients,
// bucket for bucket, and takes part in the buffer broadcast. Once every rank has joined, each
// joinable's post_hook runs: DDP copies the model of the last rank to join to all ranks.
//
// finish() is the end of PyTorch's `with` block. A Join destroyed without it (the scope left
// normally) calls it from the destructor; a destructor cannot throw, so an exception from it
// there (throw_on_early_termination, a CommError) is printed and ends the process with
// std::terminate(). Call finish() to catch it. A Join destroyed while an exception leaves the
// scope does nothing more, as in PyTorch: the exception propagates, no collective is started.
#pragma once

#include <memory>
#include <vector>

#include "ddprun/comm.hpp"
#include "ddprun/export.hpp"

namespace ddprun {

struct JoinOptions {
  // False turns the Join into a no-op, for inputs known to be even.
  bool enable = true;
  // When some rank runs out of inputs, throw std::runtime_error on every rank instead of
  // shadowing: from the next forward pass on the ranks still training, from finish() on the
  // ones that ran out. Nothing is then averaged over fewer ranks.
  bool throw_on_early_termination = false;
  // For DDP: divide the gradient sum by the world size the job started with, so that a joined
  // rank counts as a rank with zero gradients (PyTorch's default). False: divide by the number
  // of ranks still training in that iteration.
  bool divide_by_initial_world_size = true;
};

// The collectives a joined rank runs on behalf of one joinable.
class DDPRUN_API JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Once for every iteration in which some rank still trains, on every rank that has joined:
  // the collectives of one training iteration (forward, backward, step) of this joinable.
  virtual void main_hook() {}
  // Once all ranks have joined. `is_last_joiner`: this rank was among the last to join, so its
  // state is the most recent.
  virtual void post_hook(bool is_last_joiner) { (void)is_last_joiner; }
};

// Something whose per-iteration collectives a Join can shadow (DistributedDataParallel). It calls
// Join::notify_join_context(*this) before its own collectives of each iteration.
class DDPRUN_API Joinable {
 public:
  virtual ~Joinable() = default;
  // The hook a Join runs for this joinable; `options` are the Join's.
  virtual std::unique_ptr<JoinHook> join_hook(const JoinOptions& options) = 0;
  // The communicator of the Join's own collectives (the count of ranks still training).
  virtual Comm& join_comm() = 0;

 protected:
  // What the enclosing Join asks of this joinable; all false outside a Join.
  struct JoinConfig {
    bool enable = false;
    bool throw_on_early_termination = false;
    // The first joinable of a Join runs the Join's collectives in notify_join_context().
    bool is_first_joinable = false;
  };
  const JoinConfig& join_config() const { return join_config_; }

 private:
  friend class Join;
  JoinConfig join_config_;
};

class DDPRUN_API Join {
 public:
  // Not collective. `joinables` (at least one; their hooks run in this order) must outlive the
  // Join and share one communicator; each is in at most one Join at a time. Throws
  // std::invalid_argument otherwise.
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  // See the top of this file: finish() unless already called or an exception is leaving the scope.
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Collective over all ranks, each calling it once it has no more inputs. Shadows the other
  // ranks' iterations until every rank has joined, then runs the post hooks. Blocks until then;
  // the job's collective timeout bounds each wait. With throw_on_early_termination, throws
  // std::runtime_error if another rank was still training. Throws CommError when a peer fails.
  // Afterwards the joinables are outside any Join again. A second call does nothing.
  void finish();

  // For joinables: call before this iteration's own collectives (DDP: at the start of each
  // forward pass). Tells the Join that this rank has not joined, and returns the number of ranks
  // that have not (this one included); 0 when `joinable` is not the first of an enabled Join,
  // which then starts no collective. With throw_on_early_termination, throws std::runtime_error
  // once some rank has joined.
  static int notify_join_context(Joinable& joinable);

 private:
  void release();

  std::vector<Joinable*> joinables_;
  std::vector<std::unique_ptr<JoinHook>> hooks_;
  JoinOptions options_;
  int uncaught_at_start_;
  bool finished_ = false;
};

}  // namespace ddprun
