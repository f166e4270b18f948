// NCCL's async error handling under the name the library's libtorch reads (comm/nccl_env.hpp).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "nccl_env.hpp"

namespace {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

void put(const char* name, const std::optional<std::string>& value) {
  if (value) {
    ::setenv(name, value->c_str(), 1);
  } else {
    ::unsetenv(name);
  }
}

}  // namespace

TEST_CASE("a NCCL process group gets the async error handling name its libtorch reads") {
  struct Case {
    int major, minor;
    std::optional<std::string> current, old;          // as ddprun (or the user) left them
    std::optional<std::string> current_after, old_after;
  };
  const std::vector<Case> cases = {
      // 2.2 and later: the old name, which they warn about, goes; its value stays if it was the only one.
      {2, 11, "1", "1", "1", std::nullopt},
      {2, 2, std::nullopt, "0", "0", std::nullopt},
      {2, 2, "1", std::nullopt, "1", std::nullopt},
      {3, 0, "0", "1", "0", std::nullopt},
      // before 2.2: the old name, the only one read, takes the new one's value when unset.
      {1, 13, "1", std::nullopt, "1", "1"},
      {2, 1, "0", "1", "0", "1"},
      {1, 13, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
  };
  for (const Case& c : cases) {
    CAPTURE(c.major);
    CAPTURE(c.minor);
    put("TORCH_NCCL_ASYNC_ERROR_HANDLING", c.current);
    put("NCCL_ASYNC_ERROR_HANDLING", c.old);
    ddprun::detail::use_nccl_async_error_handling_of(c.major, c.minor);
    CHECK(get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == c.current_after);
    CHECK(get("NCCL_ASYNC_ERROR_HANDLING") == c.old_after);
  }
  put("TORCH_NCCL_ASYNC_ERROR_HANDLING", std::nullopt);
  put("NCCL_ASYNC_ERROR_HANDLING", std::nullopt);
}
