// expand_hostlist against the real `scontrol show hostnames`; exits 77 (CTest skip) where SLURM's
// client is not installed.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

#include "ddprun/hostlist.hpp"
#include "joined_hosts.hpp"

using ddprun::slurm::expand_hostlist;
using ddprun::slurm::testing::Hosts;
using ddprun::slurm::testing::joined;

namespace {

// Lists scontrol expands (it rejects text after the last group, which we accept).
const char* const kAgainstScontrol[] = {
    "n1", "node[01-04,07]", "rack[1-2]-n[1-2]", "a,b[1-2],c", "n[8-10]", "n[099-101]", "n[1-010]",
    "n[007-8]", "n[00]", "x[3]", "[1-2]", "n[1-3,2]", "a,a", "a[1-2][3-4]", "n[1-2],m[0-1]-x[5,7]",
    "a,,b", "a b", "n[9999999999]", "gpu[000-120]", "c[1-3]-r[01-02]-n[8-11]",
    "a[1-2]b[1-2]c[5]", "a[1-2]b[1-3]c[1-2]d[1-2]", "a[1-2]-[3]-[1-2]",
};

}  // namespace

TEST_CASE("expand_hostlist agrees with scontrol show hostnames") {
  if (std::system("command -v scontrol > /dev/null 2>&1") != 0) {
    std::cout << "SKIP: scontrol is not installed (scripts/install-deps.sh --slurm)\n";
    std::exit(77);
  }
  // scontrol reads a configuration before it does anything; a minimal one suffices offline.
  char dir[] = "/tmp/ddprun-hostlist-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string conf = std::string(dir) + "/slurm.conf";
  std::ofstream(conf) << "ClusterName=hostlist\nSlurmctldHost=localhost\n"
                         "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=ALL Default=YES\n";
  for (const char* list : kAgainstScontrol) {
    CAPTURE(std::string(list));
    const std::string command = "SLURM_CONF='" + conf + "' scontrol show hostnames '" + list + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    Hosts expected;
    std::string line;
    for (int c; (c = std::fgetc(pipe)) != EOF;) {
      if (c != '\n') {
        line += static_cast<char>(c);
      } else {
        expected.push_back(line);
        line.clear();
      }
    }
    REQUIRE(pclose(pipe) == 0);
    CHECK(joined(expand_hostlist(list)) == joined(expected));
  }
  std::remove(conf.c_str());
  rmdir(dir);
}
