// Test helper: everything a file descriptor gives until its end.
#pragma once

#include <unistd.h>

#include <string>

inline std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  return text;
}
