// The table of backends (elastic/src/backends.cpp): a row for every --rdzv_backend name config/
// accepts, each with what the rules consult.
#include "backends.hpp"

#include <doctest/doctest.h>

#include "ddprun/rdzv_backend.hpp"

namespace ddprun::elastic {
namespace {

TEST_CASE("every backend name has its row, and every row what the rules call") {
  for (const char* name : {"static", "c10d", "etcd"}) {
    CAPTURE(name);
    const auto id = config::parse_rdzv_backend(name);
    REQUIRE(id);
    const BackendEntry& row = backend_entry(*id);
    CHECK(row.id == *id);
    CHECK(static_cast<bool>(row.check));
    CHECK(static_cast<bool>(row.endpoint));
    CHECK((static_cast<bool>(row.make) || !row.unbuilt.empty()));
  }
  CHECK(backends().size() == 3);
}

TEST_CASE("a backend its service guards says so in its row; ddprun guards the others") {
  CHECK(backend_entry(Backend::kStatic).auth.ddprun_guards());
  CHECK(backend_entry(Backend::kC10d).auth.ddprun_guards());
  CHECK_FALSE(backend_entry(Backend::kEtcd).auth.ddprun_guards());
}

TEST_CASE("a build without a backend refuses a job of several nodes in one line, and runs one of one") {
  RendezvousConfig c;
  c.backend = Backend::kEtcd;
  c.endpoint = "e1";
  c.run_id = "job";
  c.min_nodes = c.max_nodes = 2;
#if DDPRUN_ETCD
  CHECK_NOTHROW(validate(c));
#else
  CHECK_THROWS_WITH_AS(validate(c),
                       "--rdzv_backend=etcd: this ddprun was built without the etcd rendezvous (DDPRUN_ETCD=OFF); use "
                       "--rdzv_backend=c10d or static, or a ddprun built with -DDDPRUN_ETCD=ON",
                       RendezvousConfigError);
#endif
  c.min_nodes = c.max_nodes = 1;
  CHECK_NOTHROW(validate(c));
}

}  // namespace
}  // namespace ddprun::elastic
