#include "process/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "ddprun/system.hpp"
#include "ddprun/clocks.hpp"
#include "process/spawn.hpp"

namespace ddprun::launcher {

namespace {

// The bytes of a worker's command line that ps shows in full.
constexpr std::size_t kCommandLineRoom = 2048;
// Room in the zygote's environment block for a worker's environment, which it writes over it
// (_ddprun_zygote.py: _show_environment), so that /proc/PID/environ (ps e, tools that read a
// job's variables there) shows the worker's own: the zygote's size again and this much more, in
// one variable of at most the kernel's 128 KiB a string.
constexpr std::size_t kEnvironmentRoom = 32 * 1024;
constexpr std::size_t kMaxEnvironmentString = 128 * 1024 - 1;
// The longest message the zygote sends: a line.
constexpr std::uint32_t kMaxAnswerBytes = 64 * 1024;

std::string length_prefix(std::size_t size) {
  const auto n = static_cast<std::uint32_t>(size);
  const unsigned char bytes[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                  static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  return std::string(reinterpret_cast<const char*>(bytes), 4);
}

// Sends `data` whole; the descriptors `fds` go with its first bytes. errno on failure.
int send_with_fds(int socket, const std::string& data, const std::vector<int>& fds) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    iovec iov{const_cast<char*>(data.data() + sent), data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control;
    if (sent == 0 && !fds.empty()) {
      control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    sent += static_cast<std::size_t>(n);
  }
  return 0;
}

// Reads `size` bytes by `deadline`; false when the zygote closed the socket, failed or is late.
bool read_exact(int socket, char* out, std::size_t size, std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{socket, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = ::recv(socket, out, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string wait_status_text(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by {}", signal_name(WTERMSIG(status)));
  return fmt::format("exit code {}", WEXITSTATUS(status));
}

}  // namespace

std::string encode_fork_request(const StartRequest& request, const std::string& cwd, pid_t ddprun) {
  std::string out;
  const auto field = [&out](const std::string& value) {
    out += value;
    out += '\0';
  };
  // PYTHON -u [-m] PROGRAM ARGS: the zygote is PYTHON.
  const bool module = request.argv.size() > 2 && request.argv[2] == "-m";
  const auto program = request.argv.begin() + std::min<std::size_t>(request.argv.size(), module ? 3 : 2);
  field(module ? "module" : "script");
  field(cwd);
  field(std::to_string(ddprun));
  std::string cpus;
  for (int cpu = 0; request.cpus != nullptr && cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, request.cpus)) cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu);
  }
  field(cpus);
  const std::int64_t start_by = deadline_ns(request.start_by);
  field(start_by != 0 ? std::to_string(start_by) : "");
  field(std::to_string(request.argv.end() - program));
  for (auto arg = program; arg != request.argv.end(); ++arg) field(*arg);
  field(std::to_string(request.environ.size()));
  for (const auto& entry : request.environ) field(entry);
  out.pop_back();  // fields are separated, not terminated
  return out;
}

std::unique_ptr<Zygote> Zygote::start(const std::string& python, const std::string& script,
                                      const std::vector<std::string>& environ, const std::string& preload,
                                      const std::string& compile_first, bool background, std::string& why) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    why = fmt::format("socketpair: {}", std::strerror(errno));
    return nullptr;
  }
  UniqueFd mine(pair[0]);
  UniqueFd theirs(pair[1]);
  // Inherited by the zygote only: ddprun starts no other process while this runs.
  ::fcntl(theirs.get(), F_SETFD, 0);
  StartRequest request;
  // The last argument is room for a worker's command line, which it writes over the zygote's
  // arguments (_ddprun_zygote.py: _show_command_line), so that ps and pgrep -f show its own.
  request.argv = {python,       "-u",          script, std::to_string(theirs.get()), preload,
                  compile_first, std::string(kCommandLineRoom, ' ')};
  request.environ = environ;
  std::size_t environ_size = 0;
  for (const auto& entry : environ) environ_size += entry.size() + 1;
  if (background) request.environ.push_back("DDPRUN_ZYGOTE_BACKGROUND=1");  // it takes it out of its environment
  const std::string room_name = "DDPRUN_ZYGOTE_ENV_ROOM=";
  request.environ.push_back(
      room_name + std::string(std::min(environ_size + kEnvironmentRoom, kMaxEnvironmentString - room_name.size()), ' '));
  const SpawnResult spawned = spawn_process(request);
  if (spawned.pid < 0) {
    why = fmt::format("could not start {}: {}", python, std::strerror(spawned.error));
    return nullptr;
  }
  return std::unique_ptr<Zygote>(new Zygote(spawned.pid, std::move(mine)));
}

void Zygote::hurry() {
  if (poll() != State::kImporting || reaped_) return;
  // SIGUSR2 takes its priority back (_ddprun_zygote.py). Sent only while it runs at a lower
  // priority than ddprun, which it takes only once its handler is there: before, the signal's
  // default would kill it; once ready it ignores the signal.
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid_));
  if (errno == 0 && nice > ::getpriority(PRIO_PROCESS, 0)) ::kill(pid_, SIGUSR2);
}

Zygote::~Zygote() {
  socket_.reset();
  if (!reaped_) ::kill(pid_, SIGKILL);  // ddprun's reaping (or its exit) collects it
}

void Zygote::gone(std::string why) {
  if (state_ == State::kGone) return;
  state_ = State::kGone;
  why_gone_ = std::move(why);
  socket_.reset();
  if (!reaped_) ::kill(pid_, SIGKILL);
}

std::string Zygote::receive(std::chrono::steady_clock::time_point deadline) {
  char head[4];
  if (!read_exact(socket_.get(), head, 4, deadline)) {
    gone(std::chrono::steady_clock::now() >= deadline ? "it did not answer in time" : "it died");
    return "";
  }
  const std::uint32_t size = static_cast<unsigned char>(head[0]) | static_cast<unsigned char>(head[1]) << 8 |
                             static_cast<unsigned char>(head[2]) << 16 |
                             static_cast<std::uint32_t>(static_cast<unsigned char>(head[3])) << 24;
  std::string text(std::min(size, kMaxAnswerBytes), '\0');
  if (size > kMaxAnswerBytes || !read_exact(socket_.get(), text.data(), text.size(), deadline)) {
    gone("its answer was cut short");
    return "";
  }
  return text;
}

Zygote::State Zygote::poll() {
  if (state_ != State::kImporting) return state_;
  pollfd p{socket_.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return state_;
  const std::string message = receive(std::chrono::steady_clock::now() + kZygoteAnswerLimit);
  if (message == "ready") {
    state_ = State::kReady;
  } else if (!message.empty()) {
    import_failed_ = message.rfind("failed ", 0) == 0;
    gone(import_failed_ ? message.substr(7) : "it said: " + message);
  }
  return state_;
}

pid_t Zygote::fork_worker(const StartRequest& request, const std::string& cwd) {
  const std::string payload = encode_fork_request(request, cwd, ::getpid());
  std::vector<int> fds = {STDIN_FILENO, request.stdout_fd, request.stderr_fd};
  if (request.cgroup_procs_fd >= 0) fds.push_back(request.cgroup_procs_fd);
  const int error = send_with_fds(socket_.get(), length_prefix(payload.size()) + payload, fds);
  if (error != 0) {
    gone(fmt::format("it took no request ({})", std::strerror(error)));
    return -1;
  }
  const std::string answer = receive(std::chrono::steady_clock::now() + kZygoteAnswerLimit);
  if (answer.rfind("pid ", 0) == 0) {
    try {
      return static_cast<pid_t>(std::stol(answer.substr(4)));
    } catch (const std::exception&) {
    }
  }
  if (answer.rfind("refused ", 0) == 0) gone(answer.substr(8));
  else if (!answer.empty()) gone("it answered: " + answer);
  return -1;
}

void Zygote::exited(int status) {
  reaped_ = true;
  gone(fmt::format("it died ({})", wait_status_text(status)));
}

}  // namespace ddprun::launcher
