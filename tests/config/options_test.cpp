// The options before they are merged: the table's names in PET_* variables, and --config files,
// good, bad and hostile.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"

using namespace ddprun::config;

namespace {

LaunchConfig resolve(const RawOptions& cli, const RawOptions& file = {}) {
  ResolveContext context;
  context.cpu_count = 6;
  context.gpu_count = 0;
  return resolve_config({{}, {}, file, cli}, {"train"}, context);
}

// The test's temporary folders, removed when the test program ends.
struct TempFolders {
  std::vector<std::string> made;
  ~TempFolders() {
    std::error_code ignored;
    for (const auto& folder : made) std::filesystem::remove_all(folder, ignored);
  }
};

// A file in a fresh temporary folder, with `text` in it.
std::string temp_file(const std::string& name, const std::string& text) {
  static TempFolders folders;
  char folder[] = "/tmp/ddprun-config-test.XXXXXX";
  REQUIRE(::mkdtemp(folder) != nullptr);
  folders.made.emplace_back(folder);
  const std::string path = std::string(folder) + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

// What options_from_json_file says of the file at `path`; empty when it takes it.
std::string message(const std::string& path) {
  try {
    options_from_json_file(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("PET_ variables name options") {
  const auto opts = options_from_environment(
      {{"PET_NPROC_PER_NODE", "4"}, {"PET_STANDALONE", "1"}, {"PET_BOGUS", "x"}, {"PATH", "/bin"}});
  CHECK(opts.size() == 2);
  CHECK(opts.at("nproc_per_node") == "4");
  CHECK(opts.at("standalone") == "1");
}

TEST_CASE("--config files") {
  const std::string data = DDPRUN_TEST_DATA;
  const auto opts = options_from_json_file(data + "/good.json");
  CHECK(opts.at("nproc_per_node") == "3");
  CHECK(opts.at("max_restarts") == "2");
  CHECK(opts.at("standalone") == "1");
  CHECK(opts.count("rdzv_id") == 0);  // null: unset

  CHECK(message(data + "/missing.json").find("cannot open the file") != std::string::npos);
  CHECK(message(data + "/not_json.json").find("not valid JSON") != std::string::npos);
  CHECK(message(data + "/unknown_key.json").find("unknown key \"nprocs\"") != std::string::npos);
  CHECK(message(data + "/bad_type.json").find("\"tee\" must be a string, number or boolean") != std::string::npos);
}

TEST_CASE("--config files: a repeatable option takes a string or an array of strings") {
  CHECK(options_from_json_file(temp_file("one.json", R"({"progress_pattern": "^step"})")).at("progress_pattern") ==
        "^step");
  CHECK(options_from_json_file(temp_file("two.json", R"({"progress-pattern": ["^step", "^epoch"]})"))
            .at("progress_pattern") == "^step\n^epoch");
  CHECK(message(temp_file("bad.json", R"({"progress_pattern": ["^step", 3]})")).find(
            "\"progress_pattern\" must be a string or an array of strings") != std::string::npos);
}

TEST_CASE("hostile --config files are usage errors") {
  const auto check = [&](const std::string& path, const char* problem) {
    CAPTURE(problem);
    const std::string m = message(path);
    CHECK_MESSAGE(m.find(problem) != std::string::npos, m);
    CHECK(m.rfind("--config ", 0) == 0);
    CHECK(m.size() < 400);
    CHECK(m.find('\n') == std::string::npos);
  };
  check(temp_file("deep.json", std::string(100000, '[') + std::string(100000, ']')), "nested deeper than 64");
  check(temp_file("deep_object.json", "{\"args\": " + std::string(100000, '[') + "}"), "nested deeper than 64");
  check(temp_file("big.json", "{\"role\": \"" + std::string(2 * 1024 * 1024, 'r') + "\"}"), "larger than 1048576 bytes");
  check(temp_file("args.json", R"({"program": "t", "args": [1, 2]})"), "\"args\" must be an array of strings");
  check(temp_file("program.json", R"({"program": 7})"), "\"program\" must be a string");
  check(temp_file("list.json", "[1, 2]"), "expected a JSON object");
  // nlohmann throws out_of_range, not parse_error, for this (found by fuzz_launch_config).
  check(temp_file("overflow.json", R"({"max_restarts": 1e400})"), "not valid JSON");
  check(temp_file("nul.json", std::string("{\"role\": \"a\0b\"}", 15)), "not valid JSON");
  check(temp_file("key.json", "{\"" + std::string(100000, 'k') + "\": 1}"), "unknown key \"kkk");
  const std::string folder = temp_file("x.json", "{}");
  check(folder.substr(0, folder.rfind('/')), "is a folder");
  check(std::string(5000, 'p'), "cannot open the file");
  // Integers of any size reach the option's own check instead of wrapping around.
  const auto opts = options_from_json_file(temp_file("huge.json", R"({"max_restarts": 18446744073709551615})"));
  CHECK(opts.at("max_restarts") == "18446744073709551615");
  std::string error;
  try {
    resolve({}, opts);
  } catch (const UsageError& e) {
    error = e.what();
  }
  CHECK(error.rfind("--max_restarts=18446744073709551615: expected", 0) == 0);
}

TEST_CASE("--config: a JSON option takes any JSON value, kept as its text") {
  const std::string path = "/tmp/ddprun_failure_rules_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"failure_rules": [{"pattern": "ECC", "kind": "gpu_fault", "retryable": true}]})";
  const auto opts = options_from_json_file(path);
  CHECK(nlohmann::json::parse(opts.at("failure_rules")) ==
        nlohmann::json::parse(R"([{"pattern": "ECC", "kind": "gpu_fault", "retryable": true}])"));
  CHECK(options_from_environment({{"PET_FAILURE_RULES", "[]"}}).at("failure_rules") == "[]");
  ::unlink(path.c_str());
}
