#include "ddprun/rendezvous_config.hpp"

#include <doctest/doctest.h>

#include "core/node_identity.hpp"
#include "etcd/etcd_backend.hpp"
#include "tcp/tcp_backends.hpp"
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace ddprun::elastic {
namespace {

TEST_CASE("endpoints") {
  struct Case {
    std::string text;
    std::string host;
    int port;
  };
  for (const Case& c : std::vector<Case>{{"host0", "host0", 29400},
                                         {"host0:1234", "host0", 1234},
                                         {"127.0.0.2:0", "127.0.0.2", 0},
                                         {"[::1]:5", "::1", 5},
                                         {"[fe80::1]", "fe80::1", 29400},
                                         {"fe80::1", "fe80::1", 29400}}) {
    CAPTURE(c.text);
    const Endpoint e = parse_endpoint(c.text, 29400);
    CHECK(e.host == c.host);
    CHECK(e.port == c.port);
  }
  for (const std::string bad : {"", ":80", "h:", "h:x", "h:70000", "[::1", "[::1]x"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_endpoint(bad, 29400), RendezvousConfigError);
  }
  CHECK_THROWS_WITH_AS(parse_endpoint("h:x", 29400),
                       "--rdzv_endpoint=h:x: bad port 'x'; expected HOST[:PORT] with PORT in 0..65535, an IPv6 "
                       "address in brackets ([::1]:29400)",
                       RendezvousConfigError);
}

TEST_CASE("one node: a static endpoint is MASTER_ADDR:MASTER_PORT, as in torchrun") {
  struct Case {
    const char* what;
    Backend backend;
    std::string endpoint;
    int master_port;
    std::string host;
    int port;  // 0: a free port
  };
  const std::vector<Case> cases = {
      {"nothing given", Backend::kStatic, "", 0, "127.0.0.1", 0},
      {"--master_port", Backend::kStatic, "", 1234, "127.0.0.1", 1234},
      {"static endpoint", Backend::kStatic, "localhost:29400", 0, "localhost", 29400},
      {"static endpoint replaces --master_port", Backend::kStatic, "h1:29400", 1234, "h1", 29400},
      {"static endpoint without a port takes --master_port's", Backend::kStatic, "h1", 1234, "h1", 1234},
      {"static endpoint without any port: a free one", Backend::kStatic, "h1", 0, "h1", 0},
      {"static endpoint with port 0: a free one", Backend::kStatic, "h1:0", 1234, "h1", 0},
      {"c10d endpoint is the rendezvous, not the master", Backend::kC10d, "h1:29400", 0, "127.0.0.1", 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    RendezvousConfig config;
    config.backend = c.backend;
    config.endpoint = c.endpoint;
    config.master_port = c.master_port;
    const Endpoint master = single_node_master(config);
    CHECK(master.host == c.host);
    CHECK(master.port == c.port);
  }
}

TEST_CASE("the static backend meets at --master_addr:--master_port unless given an endpoint") {
  RendezvousConfig c;
  c.master_addr = "h0";
  c.master_port = 1234;
  CHECK(rendezvous_endpoint(c).host == "h0");
  CHECK(rendezvous_endpoint(c).port == 1234);
  c.endpoint = "h1";
  CHECK(rendezvous_endpoint(c).port == 1234);
  c.backend = Backend::kC10d;
  CHECK(rendezvous_endpoint(c).port == kDefaultEndpointPort);
  c.endpoint.clear();
  CHECK_THROWS_WITH_AS(rendezvous_endpoint(c), "the c10d rendezvous backend needs --rdzv_endpoint=HOST[:PORT]",
                       RendezvousConfigError);
}

TEST_CASE("--rdzv_conf") {
  RendezvousConfig c;
  const auto ignored = apply_rdzv_conf(
      " join_timeout=12, last_call_timeout=0.5,close_timeout=7,heartbeat_interval=0.25,heartbeat_timeout=2,is_host=1,"
      "read_timeout=60,,store_type=tcp",
      c);
  CHECK(c.timeouts.join_timeout == 12);
  CHECK(c.timeouts.last_call_timeout == 0.5);
  CHECK(c.timeouts.close_timeout == 7);
  CHECK(c.timeouts.heartbeat_interval == 0.25);
  CHECK(c.timeouts.heartbeat_timeout == 2);
  CHECK(c.is_host == true);
  REQUIRE(ignored.size() == 2);
  CHECK(ignored[0] == "--rdzv_conf read_timeout configures torchrun's own store or its keep-alive, which ddprun does "
                      "not use; accepted, not used");
  CHECK(ignored[1].rfind("--rdzv_conf store_type ", 0) == 0);
  apply_rdzv_conf("timeout=33,is_host=false", c);
  CHECK(c.timeouts.join_timeout == 33);
  CHECK(c.is_host == false);
  CHECK(c.spares == -1);
  apply_rdzv_conf("spares=2", c);
  CHECK(c.spares == 2);
  c.min_nodes = c.max_nodes = 1;
  CHECK_THROWS_WITH_AS(validate(c),
                       "--rdzv_conf spares=2 needs --nnodes of 2 or more: a job of one node has no rendezvous to keep "
                       "spares in",
                       RendezvousConfigError);
  c.min_nodes = c.max_nodes = 2;
  c.backend = Backend::kStatic;
  CHECK_THROWS_WITH_AS(validate(c),
                       "--rdzv_conf spares=2 needs --rdzv_backend=c10d or etcd: the static backend gives every node a "
                       "--node_rank below --nnodes, and a spare has none",
                       RendezvousConfigError);

  // Suspect nodes: 2 within 600 s by default; 0 (either) turns quarantine off.
  CHECK(c.quarantine_after == 2);
  CHECK(c.quarantine_window == 600);
  apply_rdzv_conf("quarantine_after=3,quarantine_window=60.5", c);
  CHECK(c.quarantine_after == 3);
  CHECK(c.quarantine_window == 60.5);
  apply_rdzv_conf("quarantine_window=0", c);
  CHECK(c.quarantine_window == 0);
  CHECK(job_settings(c).quarantine.after == 0);
  apply_rdzv_conf("quarantine_after=0,quarantine_window=600", c);
  CHECK(job_settings(c).quarantine.after == 0);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("quarantine_after=-1", c),
                       "--rdzv_conf quarantine_after=-1: expected a whole number, 0 or more", RendezvousConfigError);
  apply_rdzv_conf("quarantine_window=0.0", c);
  CHECK(c.quarantine_window == 0);
  apply_rdzv_conf("quarantine_after=2,quarantine_window=600", c);

  CHECK_THROWS_WITH_AS(apply_rdzv_conf("join_timeout=-1", c),
                       "--rdzv_conf join_timeout=-1: expected a number of seconds greater than 0, at most 1000000000 "
                       "(about 31 years)",
                       RendezvousConfigError);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("join_timeout=5s", c),
                       "--rdzv_conf join_timeout=5s: expected a number of seconds greater than 0, at most 1000000000 "
                       "(about 31 years)",
                       RendezvousConfigError);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("quarantine_window=-5", c),
                       "--rdzv_conf quarantine_window=-5: expected a number of seconds (0 or more), at most 1000000000 "
                       "(about 31 years)",
                       RendezvousConfigError);
  // is_host takes what every flag takes (config/include/ddprun/parse.hpp), torchrun's yes and no too.
  apply_rdzv_conf("is_host=yes", c);
  CHECK(c.is_host == true);
  apply_rdzv_conf("is_host=N", c);
  CHECK(c.is_host == false);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("is_host=maybe", c),
                       "--rdzv_conf is_host=maybe: expected true or false (or 1/0, yes/no, on/off)",
                       RendezvousConfigError);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("spares=a\x1b[2J", c), "--rdzv_conf spares=a?[2J: expected a whole number, 0 or more",
                       RendezvousConfigError);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("auth=open", c), "--rdzv_conf auth=open: expected auto, secret, munge or none",
                       RendezvousConfigError);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("heartbeat", c), "--rdzv_conf 'heartbeat': expected KEY=VALUE",
                       RendezvousConfigError);
  const std::string known =
      "(ddprun's keys: join_timeout, last_call_timeout, close_timeout, heartbeat_interval, heartbeat_timeout, "
      "auth_timeout, is_host, secret_file, auth, munge_socket, max_connections, max_membership_changes, spares, "
      "quarantine_after, quarantine_window, protocol, cacert, cert, key, user, password, password_file)";
  CHECK(apply_rdzv_conf("colour=red", c) ==
        std::vector<std::string>{"--rdzv_conf 'colour' is not a key ddprun reads; accepted, not used " + known});
}

TEST_CASE("--rdzv_conf as torchrun 2.11 splits it: quotes no shell removed stay in keys and values") {
  // PyTorch's test_run.py passes "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'".
  const char* kTestRun = "'join_timeout=5,last_call_timeout=1,timeout=5'";
  const struct {
    Backend backend;
    const char* conf;
    double join_timeout;      // after it
    double last_call_timeout;
    std::vector<std::string> notes_start;  // each note's beginning
    const char* refusal;                   // or what it is refused with
  } rows[] = {
      {Backend::kC10d, kTestRun, 600, 1,
       {"--rdzv_conf ''join_timeout' is not a key ddprun reads (a quote is part of it, as torchrun reads it: no shell "
        "removed it); accepted, not used (ddprun's keys: join_timeout, ",
        "--rdzv_conf timeout=5' is not a number of seconds (a quote is part of it, as torchrun reads it: no shell "
        "removed it); the c10d backend does not read it in torchrun, so ddprun does not either (join_timeout stays "
        "600 s)"},
       nullptr},
      // torchrun's static and etcd backends read `timeout` as a number: "5'" is refused, as there.
      {Backend::kStatic, kTestRun, 0, 0, {},
       "--rdzv_conf timeout=5': expected a number of seconds greater than 0, at most 1000000000 (about 31 years); its "
       "quote is part of the value, as torchrun reads it (no shell removed it)"},
      {Backend::kEtcd, kTestRun, 0, 0, {}, "--rdzv_conf timeout=5': expected a number of seconds"},
      {Backend::kC10d, "timeout=5,join_timeout=7", 7, 30, {}, nullptr},
      {Backend::kC10d, "\"last_call_timeout=2\",timeout\"=1", 600, 30,
       {"--rdzv_conf '\"last_call_timeout' is not a key ddprun reads (a quote is part of it",
        "--rdzv_conf 'timeout\"' is not a key ddprun reads (a quote"},
       nullptr},
      {Backend::kC10d, "join_timeout=5'", 0, 0, {}, "--rdzv_conf join_timeout=5': expected a number of seconds"},
      // torchrun's keys ddprun does not use, for every backend, each named once.
      {Backend::kEtcd, "etcd_prefix=/torchelastic/p2p,use_libuv=1,keep_alive_interval=5,keep_alive_max_attempt=3", 600,
       30,
       {"--rdzv_conf etcd_prefix is where torchrun's etcd backend keeps its keys; ddprun keeps a job under "
        "/ddprun/<run id>/; accepted, not used",
        "--rdzv_conf use_libuv configures", "--rdzv_conf keep_alive_interval configures",
        "--rdzv_conf keep_alive_max_attempt configures"},
       nullptr},
      {Backend::kStatic, "etcd_prefix=/p,rank=1,heartbeat=5,ssl_cert=/c", 600, 30,
       {"--rdzv_conf etcd_prefix is", "--rdzv_conf rank is torchrun's static backend's node rank",
        "--rdzv_conf 'heartbeat' is not a key ddprun reads; accepted", "--rdzv_conf ssl_cert is torchrun's etcd-v2 name"},
       nullptr},
      // ddprun's own keys with a bad value: still refused, whatever else the line holds.
      {Backend::kC10d, "colour=red,spares=x", 0, 0, {}, "--rdzv_conf spares=x: expected a whole number, 0 or more"},
  };
  for (const auto& row : rows) {
    const std::string conf = row.conf;
    CAPTURE(conf);
    RendezvousConfig c;
    c.backend = row.backend;
    if (row.refusal != nullptr) {
      try {
        apply_rdzv_conf(row.conf, c);
        FAIL("accepted");
      } catch (const RendezvousConfigError& e) {
        const std::string what = e.what();
        CAPTURE(what);
        CHECK(what.rfind(row.refusal, 0) == 0);
      }
      continue;
    }
    const std::vector<std::string> notes = apply_rdzv_conf(row.conf, c);
    CHECK(c.timeouts.join_timeout == row.join_timeout);
    CHECK(c.timeouts.last_call_timeout == row.last_call_timeout);
    REQUIRE(notes.size() == row.notes_start.size());
    for (std::size_t i = 0; i < notes.size(); ++i) {
      CAPTURE(notes[i]);
      CHECK(notes[i].rfind(row.notes_start[i], 0) == 0);
      CHECK(notes[i].find('\n') == std::string::npos);
    }
  }
}

// A build without etcd refuses the backend before these checks (backends_test.cpp checks that).
TEST_CASE("--rdzv_backend=etcd: members, TLS and user from --rdzv_conf, and what must go together" *
          doctest::skip(!DDPRUN_ETCD)) {
  RendezvousConfig c;
  c.backend = Backend::kEtcd;
  c.min_nodes = 1;
  c.max_nodes = 3;
  c.run_id = "job";
  c.endpoint = "e1, e2:2380,[::1]:12379";
  const auto members = etcd_endpoints(c);
  REQUIRE(members.size() == 3);
  CHECK((members[0].host == "e1" && members[0].port == 2379));
  CHECK((members[1].host == "e2" && members[1].port == 2380));
  CHECK((members[2].host == "::1" && members[2].port == 12379));
  CHECK_NOTHROW(validate(c));

  apply_rdzv_conf("protocol=https,cacert=/ca.pem,cert=/c.pem,key=/k.pem,user=u,password=p", c);
  CHECK(etcd_settings(c).protocol == "https");
  CHECK(etcd_settings(c).cacert == "/ca.pem");
  CHECK(etcd_settings(c).cert == "/c.pem");
  CHECK(etcd_settings(c).key == "/k.pem");
  CHECK(etcd_settings(c).user == "u");
  CHECK(etcd_settings(c).password == "p");
  CHECK_NOTHROW(validate(c));
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("protocol=ftp", c), "--rdzv_conf protocol=ftp: expected http or https",
                       RendezvousConfigError);

  RendezvousConfig half = c;
  half.backend_conf.erase("key");
  CHECK_THROWS_WITH_AS(validate(half), "--rdzv_conf cert= and key= go together: the client certificate and its key",
                       RendezvousConfigError);
  half = c;
  half.backend_conf.erase("password");
  CHECK_THROWS_WITH_AS(validate(half), "--rdzv_conf user= and password= go together", RendezvousConfigError);

  // password_file: the password out of `ps`; one source only; a small regular file.
  {
    char path[] = "/tmp/ddprun-etcd-password-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path) << "s3cret\n";
    RendezvousConfig from_file;
    apply_rdzv_conf(std::string("user=u,password_file=") + path, from_file);
    load_secret(from_file, nullptr);
    CHECK(etcd_settings(from_file).password == "s3cret");
    RendezvousConfig both;
    apply_rdzv_conf(std::string("user=u,password=p,password_file=") + path, both);
    CHECK_THROWS_WITH_AS(load_secret(both, nullptr), doctest::Contains("two sources of one password"),
                         RendezvousConfigError);
    std::remove(path);
    RendezvousConfig device;
    apply_rdzv_conf("user=u,password_file=/dev/zero", device);
    CHECK_THROWS_WITH_AS(load_secret(device, nullptr), doctest::Contains("expected a regular file"),
                         RendezvousConfigError);
    CHECK_THROWS_AS(apply_rdzv_conf("password_file=", device), RendezvousConfigError);
  }
  half = c;
  half.run_id.clear();
  CHECK_THROWS_WITH_AS(validate(half), "the etcd rendezvous needs --rdzv_id: it names the job's keys in etcd",
                       RendezvousConfigError);
  half = c;
  half.endpoint = " , ";
  CHECK_THROWS_AS(validate(half), RendezvousConfigError);
  half.endpoint = "e1,e2:x";
  CHECK_THROWS_AS(validate(half), RendezvousConfigError);
  half.max_nodes = 1;
  half.min_nodes = 1;
  CHECK_NOTHROW(validate(half));  // one node meets nobody: etcd is not asked
}

TEST_CASE("validate") {
  auto multi_node = [] {
    RendezvousConfig c;
    c.backend = Backend::kC10d;
    c.endpoint = "h0";
    c.run_id = "job";
    c.min_nodes = 2;
    c.max_nodes = 4;
    return c;
  };
  CHECK_NOTHROW(validate(RendezvousConfig{}));
  CHECK_NOTHROW(validate(multi_node()));
  struct Case {
    std::string error;
    void (*change)(RendezvousConfig&);
  };
  const std::vector<Case> cases = {
      {"--nnodes=3:2 needs 0 < MIN <= MAX", [](RendezvousConfig& c) { c.min_nodes = 3, c.max_nodes = 2; }},
      {"--nnodes=0:2 needs 0 < MIN <= MAX", [](RendezvousConfig& c) { c.min_nodes = 0; c.max_nodes = 2; }},
      {"--nnodes=2:4 needs --rdzv_backend=c10d; the static backend takes a fixed --nnodes=N",
       [](RendezvousConfig& c) { c.backend = Backend::kStatic; }},
      {"--node_rank=4 is out of range for 4 nodes (0 to 3)", [](RendezvousConfig& c) { c.node_rank = 4; }},
      {"--nproc_per_node=0 must be at least 1", [](RendezvousConfig& c) { c.nproc = 0; }},
      {"--max_restarts=-1 must not be negative", [](RendezvousConfig& c) { c.max_restarts = -1; }},
      {"--rdzv_conf heartbeat_timeout=0.5 must be longer than heartbeat_interval=0.5",
       [](RendezvousConfig& c) { c.timeouts.heartbeat_timeout = 0.5; }},
      {"--rdzv_conf heartbeat_interval=0.75 must be at most half of heartbeat_timeout=1.4",
       [](RendezvousConfig& c) { c.timeouts.heartbeat_interval = 0.75, c.timeouts.heartbeat_timeout = 1.4; }},
      {"a multi-node c10d rendezvous needs --rdzv_id, so that jobs sharing an endpoint stay apart",
       [](RendezvousConfig& c) { c.run_id.clear(); }},
      {"the c10d rendezvous backend needs --rdzv_endpoint=HOST[:PORT]", [](RendezvousConfig& c) { c.endpoint.clear(); }},
      {"rendezvous endpoint h0:0: a multi-node job needs a fixed port that every node knows",
       [](RendezvousConfig& c) { c.endpoint = "h0:0"; }},
      {"the static rendezvous backend needs --node_rank (0 to 1) on every node",
       [](RendezvousConfig& c) { c.backend = Backend::kStatic, c.min_nodes = c.max_nodes = 2; }},
  };
  for (const Case& test : cases) {
    CAPTURE(test.error);
    RendezvousConfig c = multi_node();
    test.change(c);
    CHECK_THROWS_WITH_AS(validate(c), test.error.c_str(), RendezvousConfigError);
  }
  // One node meets nobody, but a bad endpoint is still an error, not ignored.
  RendezvousConfig one_node;
  one_node.endpoint = "localhost:29400x";
  CHECK_THROWS_WITH_AS(validate(one_node),
                       "--rdzv_endpoint=localhost:29400x: bad port '29400x'; expected HOST[:PORT] with PORT in "
                       "0..65535, an IPv6 address in brackets ([::1]:29400)",
                       RendezvousConfigError);
  one_node.endpoint = ":29400";
  CHECK_THROWS_AS(validate(one_node), RendezvousConfigError);
}

TEST_CASE("who hosts the rendezvous") {
  struct Case {
    std::string name;
    Backend backend;
    int node_rank;
    std::optional<bool> is_host;
    std::vector<std::string> endpoint_addrs;
    Hosting expect;
  };
  const std::vector<std::string> own = {"127.0.0.1", "10.1.2.3"};
  const std::vector<Case> cases = {
      {"c10d, endpoint is an own address", Backend::kC10d, -1, {}, {"10.1.2.3"}, Hosting::kIfPortFree},
      {"c10d, endpoint elsewhere", Backend::kC10d, -1, {}, {"10.1.2.4"}, Hosting::kNo},
      {"c10d, endpoint unresolved", Backend::kC10d, -1, {}, {}, Hosting::kNo},
      {"is_host=1 wins", Backend::kC10d, -1, true, {"10.1.2.4"}, Hosting::kYes},
      {"is_host=0 wins", Backend::kC10d, -1, false, {"10.1.2.3"}, Hosting::kNo},
      {"static node 0", Backend::kStatic, 0, {}, {"10.1.2.4"}, Hosting::kYes},
      {"static node 1", Backend::kStatic, 1, {}, {"10.1.2.3"}, Hosting::kNo},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    RendezvousConfig config;
    config.backend = c.backend;
    config.node_rank = c.node_rank;
    config.is_host = c.is_host;
    CHECK(hosts_rendezvous(config, c.endpoint_addrs, own) == c.expect);
  }
}

}  // namespace
}  // namespace ddprun::elastic

namespace ddprun::elastic {

// Issue 16: 1e300 overflowed the join and heartbeat timers, which fired at once (exit 69).
TEST_CASE("rdzv_conf timeouts are bounded and bad values are quoted short, on one line") {
  RendezvousConfig c;
  for (const char* value : {"1e300", "inf", "nan", "1e10", "-inf", "1e400"}) {
    for (const char* key : {"join_timeout", "heartbeat_timeout", "last_call_timeout", "close_timeout"}) {
      const std::string conf = std::string(key) + "=" + value;
      CAPTURE(conf);
      CHECK_THROWS_AS(apply_rdzv_conf(conf, c), RendezvousConfigError);
    }
  }
  apply_rdzv_conf("join_timeout=1e9", c);
  CHECK(c.timeouts.join_timeout == 1e9);

  const std::string long_value(100000, '9');
  const auto notes = apply_rdzv_conf("colour" + long_value + "=1", c);  // accepted, named short
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].size() < 600);
  for (const std::string& conf : {"join_timeout=" + long_value, "is_host=" + long_value, "x\ny" + long_value}) {
    try {
      apply_rdzv_conf(conf, c);
      FAIL("accepted");
    } catch (const RendezvousConfigError& e) {
      const std::string message = e.what();
      CHECK(message.size() < 450);  // the list of known keys, and the value quoted short
      CHECK(message.find('\n') == std::string::npos);
    }
  }
  try {
    parse_endpoint(std::string(100000, 'h') + ":1", 0);
    FAIL("accepted");
  } catch (const RendezvousConfigError& e) {
    CHECK(std::string(e.what()).size() < 300);
  }
}

}  // namespace ddprun::elastic
