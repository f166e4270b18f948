// A worker failure in words: the one family of texts every console, the event log, the restart
// reason and a round's stop say about a WorkerFailure, and about the restart it caused. Each
// says the end (exit code, signal, hang) once: a cause that begins with it ("exit code 3: no
// shard") is shown without it where the end is already said. Pure; tests/elastic/failure_text_test.cpp is their table.
#pragma once

#include <string>
#include <string_view>

#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

// How it ended: "exit code 3", "hung (exit code 124)", "killed by SIGSEGV (exit code 139)", with
// a hint for a SIGKILL from outside ddprun (often the out-of-memory killer).
std::string describe_end(const WorkerFailure& failure);

// Its cause without the "exit code N" it begins with, and the ": " after that: "exit code 3: no
// shard" -> "no shard", "exit code 3" -> "". Any other cause whole.
std::string_view cause_after_end(const WorkerFailure& failure);

// Its kind, cause, where and at which step: "cuda_oom (torch.OutOfMemoryError: CUDA out of
// memory. ...) at x.py:3 at step 1234"; "" when it has no kind.
std::string describe_kind_and_cause(const WorkerFailure& failure);

// Whose failure and its kind, for the restart reason: "rank 3 on node7: cuda_oom (...)".
std::string describe_kind(const WorkerFailure& failure);

// Why a round stops, sent to every node: "worker rank 3 (local rank 1) on h2 failed with exit
// code 1: <its message's first line>", "... was killed by signal 9 (SIGKILL) sent from outside
// ddprun", "... hung".
std::string describe_stop(const WorkerFailure& failure);

// A restart's budget: "restart 2 of 5", "restart 2 of 5 within 60 s".
std::string describe_restart_budget(const RestartReason& reason);

// What a restart followed: "after rank 3 on node7: cuda_oom (...)", for a round with no progress
// "; no progress since the start (2 in a row, the crash loop ends at 5), waited 2 s", then what
// quarantine found ("; node h2 (10.0.0.2) is suspect: ...").
std::string describe_restart_cause(const RestartReason& reason);

// The whole reason, "restart 2 of 5 after rank 3 on node7: ..."; "" for none (restart 0).
std::string describe_restart(const RestartReason& reason);

}  // namespace ddprun::elastic
