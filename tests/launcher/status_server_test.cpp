// The status server over real HTTP on a free port.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "report/status_server.hpp"

using namespace ddprun::launcher;

TEST_CASE("the status server answers over HTTP on a free port") {
  StatusServer server("127.0.0.1", 0);
  REQUIRE(server.port() > 0);
  JobView view;
  view.phase = "running";
  view.ranks = {{0, 0, 100, true, std::nullopt, std::nullopt}};
  server.publish(view);
  httplib::Client client("127.0.0.1", server.port());
  auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  server.update([](JobView& v) { v.hung = "rank 0 hung"; });
  health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 503);
  auto status = client.Get("/status");
  REQUIRE(status);
  CHECK(nlohmann::json::parse(status->body)["phase"] == "running");
  auto missing = client.Get("/nothing");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK_THROWS_AS(StatusServer("127.0.0.1", server.port()), std::exception);  // in use
}
