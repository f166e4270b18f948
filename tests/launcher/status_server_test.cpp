// The status server over real HTTP on a free port.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
  auto head = client.Head("/status");
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->body.empty());
  auto post = client.Post("/status", "x", "text/plain");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK_THROWS_AS(StatusServer("127.0.0.1", server.port()), std::exception);  // in use
}

TEST_CASE("a client that sends nothing, or too much, does not hold the status server up") {
  StatusServer server("127.0.0.1", 0);
  const auto connect_raw = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server.port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    return fd;
  };
  const int silent = connect_raw();
  const int flood = connect_raw();
  const std::string junk(64 * 1024, 'x');
  // The server closes the connection once 16 KiB came without the end of a head: the write
  // either completes into the socket buffers or fails with EPIPE/ECONNRESET, never blocks for good.
  (void)::send(flood, junk.data(), junk.size(), MSG_NOSIGNAL);
  char byte;
  CHECK(::recv(flood, &byte, 1, 0) <= 0);  // closed unanswered
  httplib::Client client("127.0.0.1", server.port());
  auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  ::close(silent);
  ::close(flood);
}
