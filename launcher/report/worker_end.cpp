#include "report/worker_end.hpp"

#include <signal.h>
#include <sys/wait.h>

#include "ddprun/exit_codes.hpp"
#include "report/failure_classifier.hpp"

namespace ddprun::launcher {

WorkerEndVerdict judge_worker_end(const WorkerEnd& end) {
  WorkerEndVerdict v;
  v.signal = WIFSIGNALED(end.wait_status) ? WTERMSIG(end.wait_status) : 0;
  v.exit_code = v.signal != 0 ? exit_code::kSignalBase + v.signal : WEXITSTATUS(end.wait_status);
  v.signalled_by_ddprun = end.sent_signal != 0 || end.sent_kill || end.sent_gasp != 0;
  const bool our_signal = (v.signal != 0 && (v.signal == end.sent_signal || v.signal == end.sent_gasp)) ||
                          (v.signal == SIGKILL && end.sent_kill);
  v.signal_from_outside = v.signal != 0 && !our_signal;
  if (v.exit_code == 0) {
    v.verdict = EndVerdict::kSucceeded;
  } else if (end.past_fence_backstop && v.signal == SIGKILL && v.signal_from_outside) {
    v.verdict = EndVerdict::kFencedByGuard;
  } else if (v.signalled_by_ddprun && !end.left_message && !(v.signal == 0 && end.raised_on_its_own) &&
             (v.signal == 0 || our_signal)) {
    v.verdict = EndVerdict::kStoppedByDdprun;
  } else {
    v.verdict = EndVerdict::kFailed;
  }
  return v;
}

bool raised_on_its_own(const std::vector<std::string>& stderr_tail) {
  const auto error = find_python_error(stderr_tail);
  if (!error) return false;
  const std::string& type = error->type;
  return type != "KeyboardInterrupt" && type != "SystemExit" &&
         type.find("SignalException") == std::string::npos;  // torchelastic's, for SIGTERM
}

}  // namespace ddprun::launcher
