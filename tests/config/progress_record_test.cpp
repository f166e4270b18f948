#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/progress_record.hpp"

using ddprun::ProgressRecord;

namespace {

// The record as "step/coll/in/op", "?" for an unknown field.
std::string shown(const ProgressRecord& r) {
  const auto n = [](const std::optional<long long>& v) { return v ? std::to_string(*v) : std::string("?"); };
  return n(r.step) + "/" + n(r.collectives) + "/" + (r.in_collective ? (*r.in_collective ? "1" : "0") : "?") +
         "/" + (r.collective.empty() ? "?" : r.collective);
}

}  // namespace

TEST_CASE("progress record: what a file's content says") {
  struct Row {
    std::string content;
    std::string expected;
  };
  const std::vector<Row> table = {
      {"", "?/?/?/?"},                                                    // the file as the launcher made it
      {"step=12" + std::string(120, ' ') + "\n", "12/?/?/?"},
      {"step=3 coll=7 in=1 op=all_reduce      \n", "3/7/1/all_reduce"},
      {"coll=7 in=0 op=barrier step=4\n", "4/7/0/barrier"},                  // any order
      {"step=3 future=x coll=2\n", "3/2/?/?"},                             // unknown keys skipped
      {"step=-1 coll=x in=2 op=\n", "?/?/?/?"},                            // malformed values unknown
      {"step=1x\n", "?/?/?/?"},
      {"step=99999999999999999999\n", "?/?/?/?"},                          // out of range
      {"step=5\nstep=6\n", "5/?/?/?"},                                     // the first line only
      {"step=5  noequals  coll=1", "5/1/?/?"},                             // no newline yet, blanks
  };
  for (const auto& row : table) {
    CAPTURE(row.content);
    CHECK(shown(ddprun::parse_progress_record(row.content)) == row.expected);
  }
}

TEST_CASE("progress record: written and read back") {
  ProgressRecord record;
  CHECK(ddprun::format_progress_record(record) == std::string(ddprun::kProgressRecordBytes - 1, ' ') + "\n");
  record.step = 41;
  record.collectives = 1234567;
  record.in_collective = true;
  record.collective = "reduce_scatter_tensor";
  const std::string text = ddprun::format_progress_record(record);
  CHECK(text.size() == ddprun::kProgressRecordBytes);
  CHECK(text.back() == '\n');
  CHECK(ddprun::parse_progress_record(text) == record);
  record.collective = std::string(200, 'x');  // does not fit: nothing to write
  CHECK(ddprun::format_progress_record(record).empty());
}

TEST_CASE("progress record: a read is kept only when two agree") {
  std::vector<std::string> reads;
  std::size_t next = 0;
  const auto read = [&] { return reads[std::min(next++, reads.size() - 1)]; };
  reads = {"step=1\n", "step=1\n"};
  CHECK(ddprun::read_stable(read)->step == 1);
  next = 0;
  reads = {"step=1\n", "step=2\n", "step=2\n"};  // rewritten between the first two reads
  CHECK(ddprun::read_stable(read)->step == 2);
  next = 0;
  reads = {"a\n", "b\n", "c\n", "d\n", "e\n", "f\n"};  // never still
  reads.push_back("g\n");
  CHECK_FALSE(ddprun::read_stable(read, 3).has_value());
}
