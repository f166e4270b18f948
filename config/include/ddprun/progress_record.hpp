// The progress record: what a worker says about its progress in DDPRUN_HEARTBEAT_FILE's content,
// beyond the beat itself (a touch of the file). Part of the launcher/worker contract: ddprun's
// Python module (launcher/python_bootstrap/_ddprun_progress.py) and the worker library write it, the
// launcher reads it at each beat and when it finds a hang.
//
// The launcher creates the file empty. A worker that keeps a record sizes the file to
// kProgressRecordBytes and keeps at offset 0 one line of space-separated key=value tokens,
// padded with spaces, ending in '\n' at the last byte. It rewrites the line in place (Python
// through an mmap: no system call, no inotify event, nobody woken); the beats stay touches, at
// most every 100 ms, and the launcher reads the record when it sees one. Keys:
//   step  steps done: optimizer steps (Python), DDP backward passes or ddprun::step() (C++)
//   coll  collectives entered so far: the sequence number of the last one entered
//   in    1 while the rank is inside that collective, 0 once it returned
//   op    that collective's name (all_reduce, barrier, ...)
// Unknown keys are skipped (a newer worker, an older launcher); an absent or malformed value is
// unknown. The record can be read while the worker rewrites it: a reader reads twice and keeps
// a read only when both agree (read_stable below).
// Header-only and dependency-free: the worker library includes it too.
#pragma once

#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

inline constexpr std::size_t kProgressRecordBytes = 128;

struct ProgressRecord {
  std::optional<long long> step;
  std::optional<long long> collectives;  // "coll"
  std::optional<bool> in_collective;     // "in"
  std::string collective;                // "op", "" when unknown

  bool operator==(const ProgressRecord& other) const {
    return step == other.step && collectives == other.collectives && in_collective == other.in_collective &&
           collective == other.collective;
  }
};

namespace progress_record_detail {

inline std::optional<long long> number(std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace progress_record_detail

// The record in `content` (the file's bytes; an empty file has none: every field unknown).
inline ProgressRecord parse_progress_record(std::string_view content) {
  using progress_record_detail::number;
  ProgressRecord record;
  const auto newline = content.find('\n');
  if (newline != std::string_view::npos) content = content.substr(0, newline);
  while (!content.empty()) {
    const auto space = content.find(' ');
    const std::string_view token = content.substr(0, space);
    content = space == std::string_view::npos ? std::string_view() : content.substr(space + 1);
    const auto equals = token.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view key = token.substr(0, equals), value = token.substr(equals + 1);
    if (key == "step") {
      record.step = number(value);
    } else if (key == "coll") {
      record.collectives = number(value);
    } else if (key == "in") {
      if (value == "0" || value == "1") record.in_collective = value == "1";
    } else if (key == "op") {
      record.collective = std::string(value);
    }
  }
  return record;
}

// The file's content for `record`: kProgressRecordBytes bytes, or "" when the record does not fit
// (an op name of about 80 characters), which a writer then leaves unwritten.
inline std::string format_progress_record(const ProgressRecord& record) {
  std::string line;
  const auto add = [&line](std::string_view key, const std::string& value) {
    if (!line.empty()) line += ' ';
    line.append(key).append("=").append(value);
  };
  if (record.step) add("step", std::to_string(*record.step));
  if (record.collectives) add("coll", std::to_string(*record.collectives));
  if (record.in_collective) add("in", *record.in_collective ? "1" : "0");
  if (!record.collective.empty()) add("op", record.collective);
  if (line.size() >= kProgressRecordBytes) return {};
  line.resize(kProgressRecordBytes - 1, ' ');
  return line + '\n';
}

// A record read while its writer may be rewriting it: `read()` gives the content; two reads that
// agree are kept, up to `tries` pairs; nullopt when none agreed (the writer kept changing it).
template <typename Read>
std::optional<ProgressRecord> read_stable(Read&& read, int tries = 3) {
  std::string before = read();
  for (int i = 0; i < tries; ++i) {
    std::string after = read();
    if (after == before) return parse_progress_record(after);
    before = std::move(after);
  }
  return std::nullopt;
}

}  // namespace ddprun
