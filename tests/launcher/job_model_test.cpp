#include <doctest/doctest.h>

#include "report/job_model.hpp"

#include <sstream>
#include <string>
#include <vector>

#include "ddprun/user_error.hpp"

using namespace ddprun::launcher;

namespace {

// A record as ddprun writes it: `time` seconds after 1000.
std::string line(double time, const std::string& node, const std::string& event, const std::string& fields = "") {
  return "{\"time\":" + std::to_string(1000 + time) + ",\"node\":\"" + node + "\",\"event\":\"" + event + "\"" +
         (fields.empty() ? "" : "," + fields) + ",\"group_rank\":0,\"attempt\":0}\n";
}

JobModel read(const std::string& text) {
  std::istringstream in(text);
  return read_job(in, "log.jsonl");
}

// One node, two workers; rank 1 fails at 5 s in round 1, round 2 runs to the end.
std::string restarted_job() {
  return line(0, "h1", "started", R"("program":"train.py")") +
         line(0.1, "h1", "round_started", R"("round":1,"restart_count":0,"world_size":2)") +
         line(0.2, "h1", "worker_started", R"("rank":0,"local_rank":0)") +
         line(0.2, "h1", "worker_started", R"("rank":1,"local_rank":1)") +
         line(1, "h1", "progress", R"("rank":0,"local_rank":0,"step":null,"beats":1)") +
         line(1, "h1", "progress", R"("rank":1,"local_rank":1,"step":null,"beats":1)") +
         line(1.1, "h1", "goodput", R"("why":"started","ett_percent":null)") +
         line(5, "h1", "worker_failed",
              R"("rank":1,"local_rank":1,"kind":"exit_code","exit_code":3,"cause":"boom <b>")") +
         line(5.2, "h1", "round_ended", R"("round":1)") +
         line(5.3, "h1", "round_started", R"("round":2,"restart_count":1,"world_size":2)") +
         line(5.3, "h1", "restart",
              R"("decision":"restart","restart_count":1,"max_restarts":1,"reason":"after rank 1")") +
         line(6, "h1", "worker_started", R"("rank":0,"local_rank":0)") +
         line(6, "h1", "worker_started", R"("rank":1,"local_rank":1)") +
         line(7, "h1", "progress", R"("rank":1,"local_rank":1,"step":null,"beats":1)") +
         line(9, "h1", "round_ended", R"("round":2)") +
         line(9.1, "h1", "goodput", R"("why":"exit","ett_percent":61.5,"summary":"goodput 61.5%")") +
         line(9.2, "h1", "exit", R"("exit_code":0)");
}

}  // namespace

TEST_CASE("a job restarted once: its rounds, failure, waits, progress and goodput") {
  const JobModel job = read(restarted_job());
  CHECK(job.start == doctest::Approx(1000));
  CHECK(job.end - job.start == doctest::Approx(9.2));
  CHECK(job.program == "train.py");
  CHECK(job.nodes == std::vector<std::string>{"h1"});
  CHECK(job.finished());
  CHECK(job.exits.at("h1") == 0);
  CHECK(job.round_count() == 2);
  REQUIRE(job.rounds.size() == 2);
  CHECK(*job.rounds[0].workers_started == doctest::Approx(0.2));
  CHECK(*job.rounds[0].end == doctest::Approx(5.2));
  CHECK(job.rounds[1].restart_count == 1);
  REQUIRE(job.failures.size() == 1);
  CHECK(job.failures[0].rank == 1);
  CHECK(job.failures[0].kind == "exit_code");
  CHECK(job.failures[0].round == 1);
  CHECK(job.failures[0].exit_code == 3);
  CHECK(job.failures[0].cause == "boom <b>");  // escaped where drawn, not here
  // What the node waited for, in order: its start, the recovery, the end after round 2.
  struct Wait {
    const char* what;
    double start, end;
  };
  const std::vector<Wait> waits = {{"starting", 0, 0.2}, {"recovering", 5.2, 6}, {"waiting", 9, 9.2}};
  REQUIRE(job.waits.size() == waits.size());
  for (std::size_t i = 0; i < waits.size(); ++i) {
    CAPTURE(i);
    CHECK(job.waits[i].what == waits[i].what);
    CHECK(job.waits[i].start == doctest::Approx(waits[i].start));
    CHECK(job.waits[i].end == doctest::Approx(waits[i].end));
  }
  REQUIRE(job.ranks.count(1) == 1);
  const auto& r1 = job.ranks.at(1);
  CHECK_FALSE(r1.steps);  // beats, no steps
  REQUIRE(r1.samples.size() == 2);
  CHECK(r1.samples[0].run == 0);
  CHECK(r1.samples[1].run == 1);  // after the restart
  CHECK(job.goodput.at("h1")["ett_percent"] == 61.5);
  std::vector<std::string> marks;
  for (const auto& m : job.marks) marks.push_back(m.event);
  CHECK(marks == std::vector<std::string>{"goodput", "restart", "exit"});  // the exit's goodput is no mark
}

TEST_CASE("a log of a job still running or killed: no exit, a last line cut short") {
  std::string text = restarted_job();
  text = text.substr(0, text.rfind("{\"time\":1009.1"));  // before the goodput and exit records
  const JobModel running = read(text);
  CHECK_FALSE(running.finished());
  CHECK_FALSE(running.last_line_cut);
  const JobModel cut = read(text + R"({"time":1009.5,"node":"h1","eve)");
  CHECK_FALSE(cut.finished());
  CHECK(cut.last_line_cut);
  CHECK(cut.unreadable == 0);
  CHECK(cut.records == running.records);
}

TEST_CASE("lines that are no record are counted and left out") {
  const JobModel job = read("not json\n" + restarted_job() + "{\"event\":\"x\"}\n[1,2]\n");
  CHECK(job.unreadable == 3);
  CHECK(job.round_count() == 2);
}

TEST_CASE("an appended log: the last job") {
  const JobModel job = read(restarted_job() + line(100, "h1", "started", R"("program":"second.py")") +
                            line(100.5, "h1", "round_started", R"("round":1)"));
  CHECK(job.earlier_jobs == 1);
  CHECK(job.program == "second.py");
  CHECK(job.start == doctest::Approx(1100));
  CHECK(job.failures.empty());
  CHECK(job.round_count() == 1);
}

TEST_CASE("two nodes: a failure on one makes both nodes' wait a recovery") {
  const JobModel job = read(
      line(0, "a", "started") + line(0, "b", "started") + line(1, "a", "round_started", R"("round":1)") +
      line(1, "b", "round_started", R"("round":1)") + line(2, "a", "worker_started", R"("rank":0)") +
      line(2, "b", "worker_started", R"("rank":1)") + line(3, "a", "round_ended", R"("round":1)") +
      line(3.1, "b", "worker_failed", R"("rank":1,"kind":"host_oom")") + line(3.2, "b", "round_ended", R"("round":1)"));
  CHECK(job.nodes == std::vector<std::string>{"a", "b"});
  CHECK_FALSE(job.finished());
  REQUIRE(job.waits.size() == 4);
  CHECK(job.waits[2].node == "a");
  CHECK(job.waits[2].what == "recovering");  // the failure's record came after a's round_ended
  CHECK(job.waits[3].what == "recovering");
  CHECK(job.waits[3].end == doctest::Approx(3.2));  // still waiting at the log's end
}

TEST_CASE("an empty or foreign file: one line naming it") {
  struct Case {
    const char* text;
    const char* said;
  };
  for (const Case& c :
       {Case{"", "report log.jsonl: the file is empty"}, Case{"\n\n", "report log.jsonl: the file is empty"},
        Case{"hello\nworld\n", "not an event log of ddprun (none of its 2 lines"},
        Case{"{\"a\":1}\n", "not an event log of ddprun"},
        Case{"{\"event\":\"started\",\"time\":\"x\",\"node\":\"h\"}\n", "not an event log of ddprun"}}) {
    CAPTURE(c.text);
    try {
      read(c.text);
      FAIL("no error");
    } catch (const ddprun::UserError& e) {
      CHECK(std::string(e.what()).find(c.said) != std::string::npos);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      CHECK(e.exit_code() == 64);
    }
  }
}

TEST_CASE("progress thinned: each stretch's lowest and highest, a restart's fall kept") {
  std::vector<JobModel::Sample> samples;
  for (int i = 0; i < 1000; ++i) samples.push_back({i * 0.1, double(i % 500), i / 500});
  const auto few = downsample_progress(samples, 100);
  CHECK(few.size() <= 100);
  CHECK(few.size() >= 90);
  CHECK(few.front().time == doctest::Approx(0));
  CHECK(few.back().value == 499);
  bool fell = false;
  for (std::size_t i = 1; i < few.size(); ++i) {
    CHECK(few[i].time > few[i - 1].time);
    if (few[i].value < few[i - 1].value) fell = true;
  }
  CHECK(fell);
  CHECK(downsample_progress(samples, 2000).size() == 1000);  // under the limit: all
}
