// Small facts about this machine and process that messages, reports and files need, written
// once for the launcher, elastic/ and the worker library (header-only: the worker links no
// config library).
#pragma once

#include <limits.h>
#include <string.h>
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

// "SIGTERM" for 15; "signal 99" for a number with no name.
inline std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
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
