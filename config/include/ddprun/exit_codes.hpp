// ddprun's exit codes. Public API: documented in the manual (docs/reference/ddprun.md, "Exit status",
// which tests/docs/reference_test.py checks against this file) and pinned by tests.
//
// When a worker fails, ddprun exits with the root-cause worker's own code (128+N for a
// worker killed by signal N), so scripts see what the training program reported. ddprun's
// own failures use the sysexits.h values below, which training programs rarely return.
#pragma once

namespace ddprun::exit_code {

inline constexpr int kSuccess = 0;
inline constexpr int kUsage = 64;           // bad flag, value or config file (EX_USAGE)
inline constexpr int kRendezvous = 69;      // nodes could not form or keep a job (EX_UNAVAILABLE)
inline constexpr int kInternal = 70;        // a bug or an unexpected system error (EX_SOFTWARE)
inline constexpr int kQuarantined = 71;     // left out as suspect hardware or by --health_check (EX_OSERR): drain it
inline constexpr int kHung = 124;           // a worker made no progress within --hang_timeout (as timeout(1))
inline constexpr int kCannotExecute = 126;  // the program exists but is not executable
inline constexpr int kNotFound = 127;       // the program could not be found or started
inline constexpr int kSignalBase = 128;     // 128+N: a worker died of, or ddprun was stopped by, signal N

}  // namespace ddprun::exit_code
