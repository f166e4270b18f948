// What containment.cpp reads of the kernel without a cgroup: the host's OOM kills in /proc/vmstat.
#include <doctest/doctest.h>

#include "process/containment.hpp"

using namespace ddprun::launcher;

TEST_CASE("the host's out-of-memory kills, from /proc/vmstat's text") {
  CHECK(parse_vmstat_oom_kills("nr_free_pages 123\noom_kill 7\nnr_zone_inactive_anon 4\n") == 7);
  CHECK(parse_vmstat_oom_kills("oom_kill 0") == 0);
  CHECK(parse_vmstat_oom_kills("oom_kill 18446744\n") == 18446744);
  // Not the key itself: a longer name that begins with it, or none (a kernel before 4.13).
  CHECK(parse_vmstat_oom_kills("oom_kill_other 3\nnr_free_pages 1\n") == std::nullopt);
  CHECK(parse_vmstat_oom_kills("") == std::nullopt);
  CHECK(parse_vmstat_oom_kills("oom_kill x\n") == std::nullopt);
  // This machine's kernel counts them (Linux 4.13 and later).
  CHECK(kernel_oom_kills().has_value());
}
