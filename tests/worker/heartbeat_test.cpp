#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "ddprun/heartbeat.hpp"
#include "ddprun/progress_record.hpp"
#include "ddprun/system.hpp"
#include "ddprun/worker_env.hpp"

// The library reads DDPRUN_HEARTBEAT_FILE once, at its first beat: this is the only test of the
// executable that beats, and it sets the variable first.
TEST_CASE("heartbeat and step(): beats touch the file, steps keep the progress record") {
  char folder[] = "/tmp/ddprun-heartbeat-XXXXXX";
  REQUIRE(::mkdtemp(folder) != nullptr);
  const std::string path = std::string(folder) + "/heartbeat";
  std::ofstream(path).close();  // as the launcher makes it: empty
  ::setenv(ddprun::env::kHeartbeatFile, path.c_str(), 1);

  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  ddprun::heartbeat();
  CHECK(ddprun::read_file(path).value_or("").empty());  // a beat alone keeps no record: starting is not progress

  ddprun::step();
  ddprun::step();
  ddprun::step();
  const std::string record = ddprun::read_file(path).value_or("");
  CHECK(record.size() == ddprun::kProgressRecordBytes);
  CHECK(ddprun::parse_progress_record(record).step == 3);
  CHECK_FALSE(ddprun::parse_progress_record(record).collectives.has_value());  // none entered

  ::unsetenv(ddprun::env::kHeartbeatFile);
  std::remove(path.c_str());
  ::rmdir(folder);
}
