// For the launcher's unit tests that need files: a fresh folder of their own.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <doctest/doctest.h>

namespace ddprun::launcher::testing {

// A new, empty folder in the temporary directory; the test removes it.
inline std::string temp_dir() {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/ddprun-test-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

}  // namespace ddprun::launcher::testing
