#include <doctest/doctest.h>

#include "report/job_page.hpp"

#include <string>

using namespace ddprun::launcher;

namespace {

bool has(const std::string& page, const std::string& what) { return page.find(what) != std::string::npos; }

// A finished job of one node: round 1 ends in a failure of rank 1 whose words hold markup.
JobModel failed_once() {
  JobModel job;
  job.start = 1000;
  job.end = 1010;
  job.program = "<script>alert(1)</script>.py";
  job.nodes = {"h<1>"};
  job.exits["h<1>"] = 0;
  job.records = 20;
  job.rounds.push_back({"h<1>", 1, 0, 2, 0.1, 0.2, 5.0});
  job.rounds.push_back({"h<1>", 2, 1, 2, 5.2, 6.0, 9.0});
  job.failures.push_back({"h<1>", 4.9, 1, 1, "exit_code", 3, "boom <b>&\"'"});
  job.waits.push_back({"h<1>", "starting", 0, 0.2});
  job.waits.push_back({"h<1>", "recovering", 5.0, 6.0});
  job.marks.push_back({"h<1>", 5.2, "restart", "restart 1 of 1: after <rank 1>"});
  job.goodput["h<1>"] = {{"why", "exit"},
                         {"ett_percent", 61.5},
                         {"ett_upper_bound", false},
                         {"wall_seconds", 10.0},
                         {"starting_seconds", 1.0},
                         {"training_seconds", 7.0},
                         {"recovering_seconds", 2.0},
                         {"idle_seconds", 0.0},
                         {"work_redone_seconds", nullptr},
                         {"summary", "goodput 61.5%: <started> in 1.0 s"}};
  for (int rank : {0, 1}) {
    auto& p = job.ranks[rank];
    p.rank = rank;
    p.node = "h<1>";
    for (int i = 0; i < 10; ++i) p.samples.push_back({0.5 + i * 0.4, double(i), 0});
    p.samples.push_back({6.5, 0, 1});
  }
  return job;
}

}  // namespace

TEST_CASE("html_escape: every character that could open markup or close an attribute") {
  struct Row {
    const char* in;
    const char* out;
  };
  for (const Row& r : {Row{"", ""}, Row{"plain", "plain"}, Row{"<b>", "&lt;b&gt;"}, Row{"a&b", "a&amp;b"},
                       Row{"\"q\"", "&quot;q&quot;"}, Row{"it's", "it&#39;s"}, Row{"é ü", "é ü"}}) {
    CAPTURE(r.in);
    CHECK(html_escape(r.in) == r.out);
  }
}

TEST_CASE("the page: the job's figures, escaped, self-contained") {
  const std::string page = job_page(failed_once(), "log<1>.jsonl");
  CHECK(has(page, "<!DOCTYPE html>"));
  CHECK(has(page, R"(<b id="rounds">2</b>)"));
  CHECK(has(page, R"(<b id="failures">1</b>)"));
  CHECK(has(page, "h&lt;1&gt; exited 0"));
  CHECK(has(page, R"(id="ett-h&lt;1&gt;">61.5%</span>)"));
  CHECK(has(page, "goodput 61.5%: &lt;started&gt; in 1.0 s"));
  CHECK(has(page, "work redone unknown"));
  CHECK(has(page, "rank 1 exit_code"));  // the failure's label on the timeline
  CHECK(has(page, "boom &lt;b&gt;&amp;&quot;&#39;"));
  CHECK(has(page, "&lt;script&gt;alert(1)&lt;/script&gt;.py"));
  CHECK(has(page, "after &lt;rank 1&gt;"));
  // Nothing of the log reaches the page unescaped, and nothing is fetched from elsewhere.
  CHECK_FALSE(has(page, "<script"));
  CHECK_FALSE(has(page, "<b>&"));
  CHECK_FALSE(has(page, "h<1>"));
  CHECK_FALSE(has(page, "http"));
  CHECK_FALSE(has(page, "No exit record"));
  // One line a run of each rank: two ranks, two runs each.
  std::size_t lines = 0;
  for (auto at = page.find("<polyline"); at != std::string::npos; at = page.find("<polyline", at + 1)) ++lines;
  CHECK(lines == 4);
}

TEST_CASE("the page of a job still running says so; a job without progress or goodput says why") {
  JobModel job = failed_once();
  job.exits.clear();
  job.last_line_cut = true;
  job.unreadable = 2;
  job.earlier_jobs = 1;
  job.ranks.clear();
  job.goodput.clear();
  const std::string page = job_page(job, "log.jsonl");
  CHECK(has(page, "No exit record of h&lt;1&gt;: the job was still running"));
  CHECK(has(page, "no exit record (running or killed)"));
  CHECK(has(page, "last line was cut short"));
  CHECK(has(page, "2 lines of the file are no event log record"));
  CHECK(has(page, "1 earlier jobs"));
  CHECK(has(page, "No progress record in the log"));
  CHECK(has(page, "No goodput record"));
}

TEST_CASE("a long job's page is kept small: points, ranks and rows limited, and said") {
  JobModel job = failed_once();
  job.end = job.start + 86400;
  for (int rank = 0; rank < 100; ++rank) {
    auto& p = job.ranks[rank];
    p.rank = rank;
    p.node = "h";
    p.samples.clear();
    for (int i = 0; i < 2000; ++i) p.samples.push_back({i * 43.2, double(i), 0});
  }
  for (int i = 0; i < 700; ++i) job.failures.push_back({"h<1>", 10.0 + i, 1, 1, "hang", std::nullopt, "x"});
  PageLimits limits;
  const std::string page = job_page(job, "log.jsonl", limits);
  CHECK(has(page, "Ranks drawn: the lowest 64 of 100."));
  CHECK(has(page, "64 ranks thinned to at most 600 points each"));
  CHECK(has(page, "The first 500 rows of 701."));
  CHECK(page.size() < 3'000'000);
}
