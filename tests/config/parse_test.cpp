#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/parse.hpp"

using namespace ddprun::config;

namespace {

// What a parser threw, or "" when it accepted.
template <typename Parse>
std::string refusal(Parse parse) {
  try {
    parse();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("integers: decimal, blanks before and a sign allowed, nothing after, within the range") {
  struct Case {
    std::string text;
    std::optional<long long> value;
  };
  const std::vector<Case> cases = {
      {"0", 0},
      {"42", 42},
      {"-7", -7},
      {"+3", 3},
      {" 2", 2},  // PET_NNODES=" 2" was accepted before the parsers were one
      {"007", 7},
      {"9223372036854775807", 9223372036854775807LL},
      {"", std::nullopt},
      {" ", std::nullopt},
      {"-", std::nullopt},
      {"2 ", std::nullopt},
      {"1.5", std::nullopt},
      {"1e3", std::nullopt},
      {"0x10", std::nullopt},
      {"four", std::nullopt},
      {"9223372036854775808", std::nullopt},
      {std::string("1\0" "2", 3), std::nullopt},  // a NUL inside (a JSON "\u0000"): not "1"
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(to_integer(c.text) == c.value);
  }
  CHECK(parse_integer("--max_restarts", "3", 0, 10, "a number") == 3);
  CHECK(parse_integer("--max_restarts", "10", 0, 10, "a number") == 10);
  CHECK(refusal([] { parse_integer("--max_restarts", "11", 0, 10, "a number of restarts, 0 or more"); }) ==
        "--max_restarts=11: expected a number of restarts, 0 or more");
  CHECK(refusal([] { parse_integer("--rdzv_conf spares", "-1", 0, 10, "a whole number, 0 or more"); }) ==
        "--rdzv_conf spares=-1: expected a whole number, 0 or more");
  CHECK(refusal([] { parse_integer("--master_port", "99999999999999999999", 1, 65535, "a port in 1..65535"); }) ==
        "--master_port=99999999999999999999: expected a port in 1..65535");
  // The value is quoted on one line, short.
  CHECK(refusal([] { parse_integer("PET_NNODES", "1\n2", 1, 8, "a number"); }) == "PET_NNODES=1?2: expected a number");
  CHECK(refusal([] { parse_integer("--x", std::string(200, '9'), 1, 8, "a number"); }).size() < 120);
}

TEST_CASE("seconds: 0 up to about 31 years; 0 only where allowed") {
  struct Case {
    std::string text;
    std::optional<double> value;
  };
  const std::vector<Case> cases = {
      {"0", 0.0},
      {"0.0", 0.0},
      {"30", 30.0},
      {"0.5", 0.5},
      {"1e3", 1000.0},
      {" 2", 2.0},
      {"1e9", 1e9},
      {"", std::nullopt},
      {"-1", std::nullopt},
      {"-0.5", std::nullopt},
      {"5s", std::nullopt},
      {"1e10", std::nullopt},
      {"1e308", std::nullopt},
      {"1e400", std::nullopt},
      {"inf", std::nullopt},
      {"nan", std::nullopt},
      {"soon", std::nullopt},
      {std::string("1\0" "0", 3), std::nullopt},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(to_seconds(c.text) == c.value);
  }
  CHECK(parse_seconds("--shutdown_timeout", "0", Zero::kAllowed) == 0);
  CHECK(parse_seconds("--monitor_interval", "0.1", Zero::kRefused) == 0.1);
  CHECK(refusal([] { parse_seconds("--monitor_interval", "0", Zero::kRefused); }) ==
        "--monitor_interval=0: expected a number of seconds greater than 0, at most 1000000000 (about 31 years)");
  CHECK(refusal([] { parse_seconds("--shutdown_timeout", "inf", Zero::kAllowed); }) ==
        "--shutdown_timeout=inf: expected a number of seconds (0 or more), at most 1000000000 (about 31 years)");
  CHECK(refusal([] { parse_seconds("--rdzv_conf join_timeout", "5s", Zero::kRefused); }) ==
        "--rdzv_conf join_timeout=5s: expected a number of seconds greater than 0, at most 1000000000 (about 31 "
        "years)");
}

TEST_CASE("true and false: one meaning for every flag and boolean key") {
  struct Case {
    std::string text;
    std::optional<bool> value;
  };
  const std::vector<Case> cases = {
      {"1", true},      {"true", true},   {"True", true},   {"TRUE", true}, {"t", true},  {"yes", true},
      {"Y", true},      {"on", true},     {"0", false},     {"false", false}, {"False", false}, {"f", false},
      {"no", false},    {"N", false},     {"off", false},   {"OFF", false},
      // Not booleans: empty (the caller says whether that is unset), numbers other than 0 and 1,
      // blanks, words that only start like one.
      {"", std::nullopt}, {"2", std::nullopt}, {"-1", std::nullopt}, {" 1", std::nullopt},
      {"1 ", std::nullopt}, {"yess", std::nullopt}, {"truest", std::nullopt}, {"enable", std::nullopt},
      {std::string(100000, 'y'), std::nullopt},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text.substr(0, 10));
    CHECK(to_bool(c.text) == c.value);
  }
  CHECK(parse_bool("--standalone", "yes"));
  CHECK_FALSE(parse_bool("--rdzv_conf is_host", "False"));
  CHECK(refusal([] { parse_bool("--rdzv_conf is_host", "maybe"); }) ==
        "--rdzv_conf is_host=maybe: expected true or false (or 1/0, yes/no, on/off)");
  CHECK(refusal([] { parse_bool("PET_STANDALONE", ""); }) ==
        "PET_STANDALONE=: expected true or false (or 1/0, yes/no, on/off)");
}

TEST_CASE("choices: one of a few words, the message listing them") {
  CHECK(parse_choice("--restart_on", "any", {"retryable", "any"}) == 1);
  CHECK(parse_choice("--numa_binding", "", {"", "node", "socket"}) == 0);  // "" among them: unset allowed
  CHECK(refusal([] { parse_choice("--restart_on", "always", {"retryable", "any"}); }) ==
        "--restart_on=always: expected retryable or any");
  CHECK(refusal([] { parse_choice("--start_method", "Spawn", {"spawn", "fork", "forkserver"}); }) ==
        "--start_method=Spawn: expected spawn, fork or forkserver");
  CHECK(refusal([] { parse_choice("--numa_binding", "rack", {"", "node", "socket", "exclusive", "core-complex"}); }) ==
        "--numa_binding=rack: expected node, socket, exclusive or core-complex");
  CHECK(refusal([] { parse_choice("--rdzv_conf protocol", "", {"http", "https"}); }) ==
        "--rdzv_conf protocol=: expected http or https");
  CHECK(refusal([] { parse_choice("--rdzv_conf auth", "x\ny", {"auto", "none"}); }) ==
        "--rdzv_conf auth=x?y: expected auto or none");
}

TEST_CASE("sizes: a whole number and K, M, G or T (powers of 1024), or bytes") {
  struct Row {
    const char* text;
    std::optional<unsigned long long> bytes;
  };
  const std::vector<Row> rows = {
      {"4G", 4ULL << 30},
      {"512M", 512ULL << 20},
      {"512m", 512ULL << 20},
      {"2GiB", 2ULL << 30},
      {"2gib", 2ULL << 30},
      {"1T", 1ULL << 40},
      {"64K", 64ULL << 10},
      {"1048576", 1048576},
      {"0", 0},
      {"1.5G", std::nullopt},
      {"4GB", std::nullopt},
      {"G", std::nullopt},
      {"", std::nullopt},
      {" 4G", std::nullopt},
      {"4G ", std::nullopt},
      {"-4G", std::nullopt},
      {"+4G", std::nullopt},
      {"4 G", std::nullopt},
      {"4P", std::nullopt},
      {"99999999999999999999", std::nullopt},
      {"4194305T", std::nullopt},  // 2^62 bytes is the most
      {"4194304T", 1ULL << 62},
  };
  for (const Row& row : rows) {
    CAPTURE(row.text);
    CHECK(to_size(row.text) == row.bytes);
  }
  CHECK(parse_size("--snapshot_dir_size", "4G", 1 << 20) == 4ULL << 30);
  CHECK(refusal([] { parse_size("--snapshot_dir_size", "4GB", 1 << 20); }) ==
        "--snapshot_dir_size=4GB: expected a size such as 512M or 4G (a whole number and K, M, G or T, powers of "
        "1024), at least 1024K");
  CHECK(refusal([] { parse_size("--snapshot_dir_size", "1000", 1 << 20); }) != "");  // bytes, below the least
}
