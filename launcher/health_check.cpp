#include "health_check.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <asio/io_context.hpp>
#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"
#include "ddprun/unique_fd.hpp"
#include "ddprun/worker_env.hpp"
#include "process/spawn.hpp"

namespace ddprun::launcher {
namespace {

// A line of a check's output is kept up to this many bytes: the report wants its gist.
constexpr std::size_t kMaxLineBytes = 1000;

}  // namespace

std::map<std::string, std::string> health_check_variables(const config::LaunchConfig& config, int attempt,
                                                          const elastic::RoundAssignment& last_round,
                                                          const std::string& run_id) {
  std::map<std::string, std::string> v = {
      {env::kHealthCheckAttempt, std::to_string(attempt)},
      {env::kHealthCheckTimeout, fmt::format("{:g}", config.health_check_timeout)},
      {env::kRestartCount, std::to_string(last_round.restart_count)},
      {env::kMaxRestarts, std::to_string(config.max_restarts)},
      {env::kLocalWorldSize, std::to_string(config.nproc_per_node)},
  };
  if (!run_id.empty()) v[env::kRunId] = run_id;
  return v;
}

elastic::JobOutcome health_check_quarantine(const HealthCheckReport& report, const std::string& host,
                                            const elastic::RoundAssignment& last_round) {
  elastic::JobOutcome outcome;
  outcome.exit_code = exit_code::kQuarantined;
  outcome.error = fmt::format("this node ({}) is quarantined: {}; it leaves the job", host, quarantine_reason(report));
  outcome.restarts = last_round.restart_count;
  outcome.quarantined = last_round.quarantined;
  outcome.quarantined.push_back({host, quarantine_reason(report)});
  return outcome;
}

HealthCheck::HealthCheck(Context context) : c_(std::move(context)), deadline_(c_.io), splitter_(kMaxLineBytes) {}

HealthCheck::~HealthCheck() { stop(); }

void HealthCheck::start(const std::map<std::string, std::string>& variables) {
  lines_.clear();
  splitter_ = LineSplitter(kMaxLineBytes);
  timed_out_ = false;
  started_ = std::chrono::steady_clock::now();

  std::map<std::string, std::string> environ = c_.environ;
  for (const auto& [name, value] : variables) environ[name] = value;
  StartRequest request;
  request.argv = {"/bin/sh", "-c", c_.config.health_check};
  for (const auto& [name, value] : environ) request.environ.push_back(name + "=" + value);
  // Without a cgroup of ddprun's, the guard is what kills the group if ddprun dies (as a worker's).
  guarded_ = !c_.containment.has_cgroup();
  if (guarded_) request.guard_fd = c_.guard.socket();
  // stdout and stderr into one pipe: the report shows them as they were written.
  Pipe pipe;
  try {
    pipe = Pipe::create();
  } catch (const std::system_error& e) {
    guarded_ = false;
    return end(HealthCheckEnd{0, false, e.code().value()});
  }
  request.stdout_fd = pipe.write_end.get();
  request.stderr_fd = pipe.write_end.get();
  const SpawnResult started = spawn_process(request);
  pipe.write_end.reset();
  if (started.pid <= 0) {
    guarded_ = false;
    return end(HealthCheckEnd{0, false, started.error == SpawnResult::kPastDeadline ? EAGAIN : started.error});
  }
  pid_ = started.pid;
  ::fcntl(pipe.read_end.get(), F_SETFL, ::fcntl(pipe.read_end.get(), F_GETFL) | O_NONBLOCK);
  output_ = std::make_unique<asio::posix::stream_descriptor>(c_.io, pipe.read_end.release());
  watch_output();
  deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(c_.config.health_check_timeout)));
  deadline_.async_wait([this, pid = pid_](std::error_code ec) {
    if (ec || pid != pid_) return;
    timed_out_ = true;
    ::kill(-pid_, SIGKILL);  // its end comes through the agent's reaping
  });
}

void HealthCheck::watch_output() {
  output_->async_wait(asio::posix::stream_descriptor::wait_read, [this, pid = pid_](std::error_code ec) {
    if (ec || pid != pid_ || !output_) return;
    read_output();
    if (output_) watch_output();
  });
}

void HealthCheck::read_output() {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(output_->native_handle(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The end of its output (what the group left running closed it too), or nothing more now.
      if (n == 0) output_.reset();
      return;
    }
    splitter_.feed(std::string_view(buffer, static_cast<std::size_t>(n)), [this](std::string_view line) {
      lines_.emplace_back(line);
      if (lines_.size() > kHealthCheckLines) lines_.pop_front();
    });
  }
}

bool HealthCheck::reaped(pid_t pid, int wait_status) {
  if (pid_ <= 0 || pid != pid_) return false;
  if (output_) read_output();  // all it wrote before its end is in the pipe
  end(HealthCheckEnd{wait_status, timed_out_, 0});
  return true;
}

void HealthCheck::end(HealthCheckEnd how) {
  clean_up();
  splitter_.flush([this](std::string_view line) {
    lines_.emplace_back(line);
    if (lines_.size() > kHealthCheckLines) lines_.pop_front();
  });
  HealthCheckReport report;
  report.command = c_.config.health_check;
  report.verdict = judge_health_check(how, c_.config.health_check_timeout);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  report.last_lines.assign(lines_.begin(), lines_.end());
  c_.ended(std::move(report));
}

void HealthCheck::stop() {
  if (pid_ <= 0) return;
  clean_up();
}

void HealthCheck::clean_up() {
  if (pid_ > 0) {
    // What it left in its group goes with it; the group's id is free once they are gone.
    ::kill(-pid_, SIGKILL);
    if (guarded_) c_.guard.forget(pid_);
  }
  pid_ = -1;
  guarded_ = false;
  deadline_.cancel();
  output_.reset();
}

}  // namespace ddprun::launcher
