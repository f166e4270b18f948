#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/launch_config.hpp"
#include "ddprun/progress_pattern.hpp"

using namespace ddprun::config;

namespace {

// "no": no match; "": a match without a step; else the step's digits.
std::string outcome(const std::vector<std::string>& texts, const std::string& line) {
  std::vector<ProgressPattern> patterns;
  for (const auto& t : texts) patterns.emplace_back(t);
  const auto m = match_progress(patterns, line);
  if (!m) return "no";
  return m->step ? std::to_string(*m->step) : "";
}

}  // namespace

TEST_CASE("progress patterns: which lines match, and their step") {
  struct Row {
    std::vector<std::string> patterns;
    std::string line;
    std::string expected;
  };
  const std::vector<Row> table = {
      {{"^step (?<step>[0-9]+)"}, "step 12", "12"},
      {{"^step (?<step>[0-9]+)"}, "step 12 loss 0.3", "12"},
      {{"^step (?<step>[0-9]+)"}, "  step 12", "no"},            // anchored
      {{"^step (?<step>[0-9]+)"}, "step x", "no"},
      {{"step (?P<step>\\d+)"}, "epoch 1 step 7", "7"},          // Python's spelling, searched anywhere
      {{"loss="}, "it 3 loss=0.1", ""},                          // no step group: progress without a step
      {{"(a)|b(?<step>\\d+)"}, "a", ""},                         // the step group did not take part
      {{"(a)(?:x)(?<step>\\d+)"}, "ax42", "42"},                 // numbered after one capturing group
      {{"[(](?<step>\\d+)"}, "(5", "5"},                         // a '(' in a class does not count
      {{"\\((?<step>\\d+)\\)"}, "(6)", "6"},                     // nor an escaped one
      {{"(?<step>\\d+)/\\d+"}, "99999999999999999999/3", ""},    // too large for a step: progress, no step
      {{"^epoch", "^step (?<step>\\d+)"}, "step 3", "3"},        // several: any may match
      {{"^epoch", "^step (?<step>\\d+)"}, "epoch 2", ""},
      {{"^epoch", "^step (?<step>\\d+)"}, "loss 1", "no"},
      {{"^iter (?<step>\\d+)", "^iter"}, "iter 8", "8"},        // the first that matches gives the step
  };
  for (const auto& row : table) {
    CAPTURE(row.patterns.front());
    CAPTURE(row.line);
    CHECK(outcome(row.patterns, row.line) == row.expected);
  }
}

TEST_CASE("progress patterns: only the first kProgressLineBytes of a line are searched") {
  const ProgressPattern p("x$");
  CHECK(p.match(std::string(kProgressLineBytes - 1, 'a') + "x"));
  CHECK_FALSE(p.match(std::string(kProgressLineBytes, 'a') + "x"));
  // A long line does not exhaust the stack of std::regex's recursive matcher.
  CHECK_FALSE(ProgressPattern("(a|b)*c$").match(std::string(64 * 1024, 'a')));
}

TEST_CASE("progress patterns: bad ones are usage errors naming --progress_pattern and the value") {
  struct Row {
    std::string pattern;
    std::string message;
  };
  const std::vector<Row> table = {
      {"step (", "--progress_pattern=step (: "},
      {"[0-9", "--progress_pattern=[0-9: "},
      {"", "an empty pattern would count every line as progress"},
      {"(?<epoch>\\d+)", "the only named group understood is (?<step>...), not (?<epoch>"},
      {"(?<step>\\d+) (?<step>\\d+)", "(?<step>...) appears twice"},
      {"(?<step\\d+)", "the only named group understood"},
  };
  for (const auto& row : table) {
    CAPTURE(row.pattern);
    try {
      ProgressPattern p(row.pattern);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(row.message) != std::string::npos);
      CHECK(std::string(e.what()).rfind("--progress_pattern=", 0) == 0);
    }
  }
}
