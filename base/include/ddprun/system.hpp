// Small facts about this machine and process that messages, reports and files need, written
// once for the launcher, elastic/ and the worker library (header-only: the worker links no
// config library).
#pragma once

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace ddprun {

// gethostname(), or "?" when it fails: messages that name a node.
inline std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// "SIGTERM" for 15; "signal 99" for a number with no name (real-time signals have none), as
// glibc's sigabbrev_np() names them. Our own table, not sigabbrev_np(): that needs glibc 2.32,
// and the pip wheel's launcher runs on glibc 2.28 (docs/install.md). The numbers come from
// <signal.h>, so the table holds on every Linux architecture.
inline std::string signal_name(int signal) {
  struct Name {
    int number;
    const char* name;
  };
  static constexpr Name kNames[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"},     {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"},     {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"},     {SIGSTKFLT, "SIGSTKFLT"},
      {SIGCHLD, "SIGCHLD"},     {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"},     {SIGTSTP, "SIGTSTP"},
      {SIGTTIN, "SIGTTIN"},     {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"},     {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"},     {SIGWINCH, "SIGWINCH"},
      {SIGPOLL, "SIGPOLL"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
  };
  for (const Name& n : kNames) {
    if (n.number == signal) return n.name;
  }
  return "signal " + std::to_string(signal);
}

// The whole file as bytes; nullopt when it cannot be opened.
inline std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ddprun
