#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kWorkerFailed: return "a worker failed";
    case StopReason::kNodeLost: return "a node was lost";
    case StopReason::kMembershipChange: return "the nodes of the job changed";
    case StopReason::kShutdown: return "the job is shutting down";
  }
  return "?";
}

}  // namespace ddprun::elastic
