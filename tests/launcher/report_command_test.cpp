#include <doctest/doctest.h>

#include "report/report_command.hpp"

#include <sstream>
#include <string>
#include <vector>

#include "ddprun/user_error.hpp"

using namespace ddprun::launcher;

TEST_CASE("the page's default file: the log's extension replaced by .html") {
  struct Row {
    const char* log;
    const char* page;
  };
  for (const Row& r :
       {Row{"events.jsonl", "events.html"}, Row{"events", "events.html"}, Row{"/a.b/events", "/a.b/events.html"},
        Row{"/a.b/ev.log", "/a.b/ev.html"}, Row{".events", ".events.html"}, Row{"run.1.jsonl", "run.1.html"}}) {
    CAPTURE(r.log);
    CHECK(default_report_path(r.log) == r.page);
  }
}

TEST_CASE("bad arguments: one line naming what is wrong, exit 64, nothing written") {
  struct Row {
    std::vector<std::string> args;
    const char* said;
  };
  for (const Row& r : {Row{{}, "report: no event log given; usage: ddprun report EVENT_LOG"},
                       Row{{"a.jsonl", "b.jsonl"}, "one event log at a time, not also b.jsonl"},
                       Row{{"a.jsonl", "-o"}, "-o needs a file"}, Row{{"--watch", "a.jsonl"}, "unknown option --watch"},
                       Row{{"a.jsonl", "-o", "a.jsonl"}, "-o a.jsonl is the event log itself"},
                       Row{{"/nonexistent/ev.jsonl"}, "report /nonexistent/ev.jsonl: cannot read it: No such file"}}) {
    CAPTURE(r.said);
    std::ostringstream out, err;
    try {
      report_command(r.args, out, err);
      FAIL("no error");
    } catch (const ddprun::UserError& e) {
      CHECK(std::string(e.what()).find(r.said) != std::string::npos);
      CHECK(e.exit_code() == 64);
    }
    CHECK(out.str().empty());
  }
}
