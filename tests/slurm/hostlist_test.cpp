// expand_hostlist as tables: valid lists and malformed lists.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ddprun/hostlist.hpp"
#include "joined_hosts.hpp"

using ddprun::slurm::expand_hostlist;
using ddprun::slurm::HostlistError;
using ddprun::slurm::testing::Hosts;
using ddprun::slurm::testing::joined;

namespace {

struct Valid {
  const char* list;
  Hosts hosts;
};

const Valid kValid[] = {
    {"n1", {"n1"}},
    {"login.example.org", {"login.example.org"}},
    {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
    {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
    {"a,b[1-2],c", {"a", "b1", "b2", "c"}},
    {"n[8-10]", {"n8", "n9", "n10"}},                   // width of the low end: no padding
    {"n[099-101]", {"n099", "n100", "n101"}},
    {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
    {"n[007-8]", {"n007", "n008"}},
    {"n[00]", {"n00"}},
    {"n[0-0]", {"n0"}},
    {"x[3]", {"x3"}},
    {"[1-2]", {"1", "2"}},
    {"n[1-3,2]", {"n1", "n2", "n3", "n2"}},              // order and duplicates kept
    {"a,a", {"a", "a"}},
    {"a[1-2][3-4]", {"a13", "a14", "a23", "a24"}},
    {"n[1-2],m[0-1]-x[5,7]", {"n1", "n2", "m0-x5", "m0-x7", "m1-x5", "m1-x7"}},
    {"c[1-2]-r[1-2]-n[1-2]",                             // scontrol's order for three groups
     {"c1-r1-n1", "c1-r1-n2", "c2-r1-n1", "c2-r1-n2", "c1-r2-n1", "c1-r2-n2", "c2-r2-n1", "c2-r2-n2"}},
    {"a[1-2]b[1-2]c[5]", {"a1b1c5", "a2b1c5", "a1b2c5", "a2b2c5"}},
    {"gpu[1-2]-ib", {"gpu1-ib", "gpu2-ib"}},             // text after a group
    {"a,,b", {"a", "b"}},                                // empty items skipped, as SLURM does
    {",a,", {"a"}},
    {"a b\tc\nd", {"a", "b", "c", "d"}},                 // whitespace separates too
    {"n[9999999999]", {"n9999999999"}},
    {"n[18446744073709551615]", {"n18446744073709551615"}},
};

struct Invalid {
  const char* list;
  const char* problem;  // must appear in what()
};

const Invalid kInvalid[] = {
    {"", "names no host"},
    {",", "names no host"},
    {"  ", "names no host"},
    {"n[1-2", "'[' at offset 1 is never closed"},
    {"n1-2]", "']' at offset 4 has no matching '['"},
    {"n[1-2]]", "']' at offset 6 has no matching '['"},
    {"n[[1-2]]", "'[' at offset 2 is nested in the '[' at offset 1"},
    {"n[5-3]", "range \"5-3\" at offset 2 decreases"},
    {"n[]", "empty range at offset 2"},
    {"n[1,]", "empty range at offset 4"},
    {"n[,1]", "empty range at offset 2"},
    {"n[a-b]", "range \"a-b\" at offset 2 is not N or N-M"},
    {"n[-1]", "range \"-1\" at offset 2 is not N or N-M"},
    {"n[1-]", "range \"1-\" at offset 2 is not N or N-M"},
    {"n[1--2]", "range \"1--2\" at offset 2 is not N or N-M"},
    {"n[1 ,2]", "range \"1 \" at offset 2 is not N or N-M"},
    {"n[1-2x3]", "range \"1-2x3\" at offset 2 is not N or N-M"},
    {"n[18446744073709551616]", "number \"18446744073709551616\" at offset 2 is too large"},
    {"n[1-100000]", "range \"1-100000\" at offset 2 has more than 65536 hosts"},
    {"a[1-2000]b[1-2000]", "expands to more than 1048576 hosts"},
};

}  // namespace

TEST_CASE("expand_hostlist expands valid lists") {
  for (const Valid& c : kValid) {
    CAPTURE(std::string(c.list));
    CHECK(joined(expand_hostlist(c.list)) == joined(c.hosts));
  }
}

TEST_CASE("expand_hostlist keeps the padding and order of a large range") {
  const Hosts hosts = expand_hostlist("n[0001-1000]");
  REQUIRE(hosts.size() == 1000);
  CHECK(hosts.front() == "n0001");
  CHECK(hosts[98] == "n0099");
  CHECK(hosts.back() == "n1000");
}

TEST_CASE("expand_hostlist rejects malformed lists, quoting the list and the problem") {
  for (const Invalid& c : kInvalid) {
    CAPTURE(std::string(c.list));
    try {
      expand_hostlist(c.list);
      FAIL("no exception");
    } catch (const HostlistError& e) {
      const std::string what = e.what();
      CHECK(what.find("invalid hostlist \"" + std::string(c.list) + "\": ") == 0);
      CHECK_MESSAGE(what.find(c.problem) != std::string::npos, what);
    }
  }
}

TEST_CASE("HostlistError is an invalid_argument") {
  CHECK_THROWS_AS(expand_hostlist("n[2-1]"), std::invalid_argument);
}

// Issue 16: hostile lists fail fast with a short message instead of taking gigabytes or
// quoting 100 kB back.
TEST_CASE("expand_hostlist bounds hostile lists and quotes them short") {
  const std::string long_name(100000, 'a');
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"node[1-99999999999]", "has more than 65536 hosts"},
      {"node[1-99999999999999999999999]", "is too large"},
      {long_name + "[0-65535]", "is longer than 255 characters"},
      {long_name, "is longer than 255 characters"},
      {"n[0-2000][0-1000]", "expands to more than"},
      {"a[0-60000]" + std::string(200, 'b') + "[0-15]", "expands to more than 33554432 characters"},
      {std::string(100000, '['), "is nested"},
  };
  for (const auto& c : cases) {
    const std::string& list = c.first;
    const char* problem = c.second;
    const std::string start = list.substr(0, 40);
    CAPTURE(start);
    try {
      expand_hostlist(list);
      FAIL("no exception");
    } catch (const HostlistError& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(problem) != std::string::npos, what);
      CHECK(what.size() < 300);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  // A long list of short names is fine.
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "n" + std::to_string(i) + ",";
  CHECK(expand_hostlist(many).size() == 20000);
}
