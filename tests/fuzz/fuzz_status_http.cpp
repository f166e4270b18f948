// Fuzzes the status server's answer to a request head (status_view.cpp: http_response), which
// is whatever a client on --status_addr sends: one well-formed HTTP/1.1 response with a status
// line ddprun knows, Connection: close, and a Content-Length that is the body's (none for HEAD).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "report/status_view.hpp"

using namespace ddprun::launcher;

namespace {

[[noreturn]] void finding(const char* what, const std::string& response) {
  std::fprintf(stderr, "%s: %.300s\n", what, response.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  JobView view;
  view.phase = "running";
  RankView rank;
  rank.pid = 100;
  rank.running = true;
  rank.last_beat = 1.0;
  rank.deadline = 2.0;
  view.ranks = {rank};
  const std::string response = http_response(head, view, 3.0);
  const std::string_view known[] = {"HTTP/1.1 200 OK\r\n", "HTTP/1.1 503 Service Unavailable\r\n",
                                    "HTTP/1.1 404 Not Found\r\n", "HTTP/1.1 405 Method Not Allowed\r\n",
                                    "HTTP/1.1 400 Bad Request\r\n"};
  bool status_known = false;
  for (auto line : known) status_known |= response.rfind(line, 0) == 0;
  if (!status_known) finding("unknown status line", response);
  const auto end = response.find("\r\n\r\n");
  if (end == std::string::npos) finding("no end of the headers", response);
  const std::string headers = response.substr(0, end + 2);
  if (headers.find("\r\nConnection: close\r\n") == std::string::npos) finding("no Connection: close", response);
  const auto length = headers.find("\r\nContent-Length: ");
  if (length == std::string::npos) finding("no Content-Length", response);
  const std::size_t declared = std::strtoul(headers.c_str() + length + 18, nullptr, 10);
  const std::size_t body = response.size() - end - 4;
  if (body != declared && body != 0) finding("Content-Length is not the body's", response);
  if (body == 0 && head.rfind("HEAD ", 0) != 0) finding("an empty body for a request that is not HEAD", response);
  return 0;
}
