// The fork request as the zygote reads it (launcher/python_bootstrap/_ddprun_zygote.py: _parse):
// NUL-separated fields, counted lists, no terminator; the zygote process itself is tested
// through the real ddprun (warm_start_test.sh).
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "process/zygote.hpp"

using namespace ddprun::launcher;

namespace {

std::string fields(std::initializer_list<std::string> parts) {
  std::string out;
  for (const auto& p : parts) out += p + '\0';
  out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("a fork request: kind, cwd, ddprun's pid, CPUs, start-by, then counted argv and environment") {
  // The command line a cold start would exec: the zygote is its interpreter.
  StartRequest script;
  script.argv = {"python3", "-u", "sub/train.py", "--lr", "0.1"};
  script.environ = {"RANK=0", "EMPTY=", "A=b=c"};
  CHECK(encode_fork_request(script, "/work dir", 42) ==
        fields({"script", "/work dir", "42", "", "", "3", "sub/train.py", "--lr", "0.1", "3", "RANK=0",
                "EMPTY=", "A=b=c"}));

  StartRequest module;
  module.argv = {"/usr/bin/python3", "-u", "-m", "pkg.train", ""};
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  CPU_SET(5, &cpus);
  module.cpus = &cpus;
  module.start_by = std::chrono::steady_clock::time_point(std::chrono::seconds(12) + std::chrono::nanoseconds(5));
  CHECK(encode_fork_request(module, "/", 7) ==
        fields({"module", "/", "7", "0,5", "12000000005", "2", "pkg.train", "", "0"}));

  // A script's argument "-m" is the script's.
  StartRequest dash_m;
  dash_m.argv = {"python3", "-u", "x.py", "-m"};
  CHECK(encode_fork_request(dash_m, "/", 1) == fields({"script", "/", "1", "", "", "2", "x.py", "-m", "0"}));
}
