// rank_driver's scenarios of collectives, faults and the library's other parts: collectives,
// peer_fault, mismatch, extra_backward, sampler, store_ops (usage in rank_driver.cpp).
#include "rank_driver.hpp"

namespace rank_driver {
namespace {

// Rank 0 reports how a collective against a dead or silent peer ended.
void report(const std::string& out, const std::chrono::steady_clock::time_point start,
            const std::string& outcome) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file(out + "/result", outcome + "\nseconds " + std::to_string(seconds) + "\n");
}

}  // namespace

int collectives(const std::string& out, const ddprun::ProcessGroupOptions& options) {
  auto comm = ddprun::init_process_group(options);
  const int r = comm->rank();
  const int w = comm->size();
  const auto on = [&](torch::Tensor t) { return t.to(comm->device()); };
  const auto same = [](const torch::Tensor& a, const torch::Tensor& b) { return torch::equal(a.cpu(), b.cpu()); };
  auto t = on(torch::tensor({double(r + 1), double(-r), 2.0 * r}));
  ddprun::all_reduce(*comm, t, ddprun::ReduceOp::kSum);
  expect(t[0].item<double>() == w * (w + 1) / 2.0, "all_reduce sum");
  auto mn = on(torch::tensor({double(r)}));
  ddprun::all_reduce(*comm, mn, ddprun::ReduceOp::kMin);
  expect(mn.item<double>() == 0, "all_reduce min");
  auto mx = on(torch::tensor({double(r)}));
  ddprun::all_reduce(*comm, mx, ddprun::ReduceOp::kMax);
  expect(mx.item<double>() == w - 1, "all_reduce max");
  auto mean = on(torch::full({2, 3}, double(r)));
  ddprun::reduce_mean(*comm, mean);
  expect(torch::allclose(mean.cpu(), torch::full({2, 3}, (w - 1) / 2.0)), "reduce_mean");
  auto strided = on(torch::arange(12, torch::kFloat).reshape({3, 4})).t() * (r + 1);  // not contiguous
  ddprun::all_reduce(*comm, strided);
  expect(same(strided, torch::arange(12, torch::kFloat).reshape({3, 4}).t() * (w * (w + 1) / 2)),
         "all_reduce of a non-contiguous tensor");
  // Over 2 MiB, so gloo reduces it in parts (gloo_comm.cpp); of odd length, so they differ.
  const auto ramp = torch::arange((int64_t{1} << 19) + 1, torch::kDouble);  // 4 MiB + 8 bytes
  auto big = on(ramp * (r + 1));
  ddprun::all_reduce(*comm, big);
  expect(same(big, ramp * (w * (w + 1) / 2)), "all_reduce of a tensor reduced in parts");
  auto b = on(torch::full({4}, double(r == 1 % w ? 42 : r)));
  ddprun::broadcast(*comm, b, 1 % w);
  expect(same(b, torch::full({4}, 42.0, torch::kDouble)), "broadcast from rank 1");
  const auto gathered = ddprun::all_gather(*comm, on(torch::full({2}, r, torch::kLong)));
  expect(static_cast<int>(gathered.size()) == w, "all_gather size");
  for (int i = 0; i < w; ++i) expect(same(gathered[i], torch::full({2}, i, torch::kLong)), "all_gather");
  const auto names = ddprun::all_gather_bytes(*comm, std::string(r + 1, char('a' + r)));
  for (int i = 0; i < w; ++i) expect(names[i] == std::string(i + 1, char('a' + i)), "all_gather_bytes");
  ddprun::barrier(*comm);
  write_file(out + "/collectives." + std::to_string(r), comm->backend() + " " + std::to_string(w) + "\n");
  return 0;
}

int peer_fault(const std::string& out, bool dies, const ddprun::ProcessGroupOptions& options) {
  ::signal(SIGTERM, SIG_IGN);  // ddprun stops the group when rank 1 dies: rank 0 reports first
  auto comm = ddprun::init_process_group(options);
  ddprun::barrier(*comm);
  if (comm->rank() == 1) {
    if (dies) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is in all_reduce
      ::raise(SIGKILL);
    }
    while (!exists(out + "/result")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  }
  auto t = torch::ones({1024});
  const auto start = std::chrono::steady_clock::now();
  try {
    // On a GPU an all_reduce returns before it completes (the stream waits, not the CPU);
    // barrier() blocks the CPU, bounded by the collective timeout.
    if (comm->device().is_cuda()) {
      ddprun::barrier(*comm);
    } else {
      ddprun::all_reduce(*comm, t);
    }
    report(out, start, "no error");
  } catch (const ddprun::CommError& e) {
    report(out, start, std::string("CommError: ") + e.what());
  } catch (const std::exception& e) {
    report(out, start, std::string("other exception: ") + e.what());
  }
  return 0;
}

int mismatch(const std::string& out) {
  auto comm = ddprun::init_process_group();
  auto net = std::make_shared<Net>(comm->rank() == 1 ? 12 : 16);
  try {
    ddprun::DistributedDataParallel ddp(net, comm);
    write_file(out + "/mismatch." + std::to_string(comm->rank()), "no error\n");
  } catch (const std::exception& e) {
    write_file(out + "/mismatch." + std::to_string(comm->rank()), std::string(e.what()) + "\n");
  }
  return 0;
}

// Rank 0 runs one backward pass more than the others in step 3: from there on the ranks'
// collective calls differ, which must end in a CommError naming both calls (through run_main,
// in the error file), not in a gloo abort or silently averaged garbage.
int extra_backward(int, char**) {
  auto comm = ddprun::init_process_group();
  auto net = std::make_shared<Net>();
  ddprun::DistributedDataParallel ddp(net, comm);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  const auto x = torch::randn({8, 8});
  const auto y = torch::randn({8, 4});
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y);
    loss.backward();
    if (step == 3 && comm->rank() == 0) {
      torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y).backward();
    }
    opt.step();
    auto l = loss.detach().clone();
    ddprun::reduce_mean(*comm, l);
  }
  return 0;
}

int sampler() {
  int64_t n, w, seed, epoch, drop_last, shuffle;
  while (std::cin >> n >> w >> seed >> epoch >> drop_last >> shuffle) {
    for (int r = 0; r < w; ++r) {
      ddprun::SamplerSpec spec{n, static_cast<int>(w), r, shuffle != 0, static_cast<uint64_t>(seed), drop_last != 0};
      std::cout << n << " " << w << " " << seed << " " << epoch << " " << drop_last << " " << shuffle << " r" << r << ":";
      for (int64_t i : ddprun::distributed_indices(spec, epoch)) std::cout << " " << i;
      std::cout << "\n";
    }
  }
  return 0;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Two ranks, each with its own client of the store at MASTER_ADDR:MASTER_PORT, and keys of its
// own, so that the results do not depend on which rank runs first.
int store_ops(const std::string& out) {
  const ddprun::LaunchEnv env = ddprun::launch_env_from_process();
  expect(env.world_size == 2 && env.use_agent_store, "2 ranks using the launcher's store");
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(60);
  c10d::TCPStore store(env.master_addr, options);
  const std::string me = "r" + std::to_string(env.rank) + "/";
  const std::string peer = "r" + std::to_string(1 - env.rank) + "/";

  store.set(me + "hello", bytes_of("from " + me));
  store.wait({peer + "hello"});
  expect(text_of(store.get(peer + "hello")) == "from " + peer, "get the peer's key");
  expect(store.add(me + "n", 5) == 5 && store.add(me + "n", -2) == 3, "add");
  expect(text_of(store.get(me + "n")) == "3", "an added key reads as its decimal text");
  expect(text_of(store.compareSet(me + "n", bytes_of("3"), bytes_of("x"))) == "x", "compare_set swaps");
  expect(text_of(store.compareSet(me + "n", bytes_of("3"), bytes_of("y"))) == "x", "compare_set keeps");
  expect(text_of(store.compareSet(me + "new", {}, bytes_of("z"))) == "z", "compare_set creates");
  expect(store.check({me + "new", peer + "hello"}) && !store.check({me + "absent"}), "check");
  expect(store.deleteKey(me + "new") && !store.deleteKey(me + "new"), "delete_key");
  expect(store.getNumKeys() >= 3, "getNumKeys counts the keys");
  bool timed_out = false;
  try {
    store.wait({me + "absent"}, std::chrono::milliseconds(200));
  } catch (const c10::Error&) {
    timed_out = true;
  }
  expect(timed_out, "a wait for a missing key times out");
#if TORCH_VERSION_MAJOR >= 2
  store.append(me + "log", bytes_of("a"));
  store.append(me + "log", bytes_of("b"));
  store.multiSet({me + "m1", me + "m2"}, {bytes_of("1"), bytes_of("22")});
  const auto values = store.multiGet({me + "log", me + "m1", me + "m2"});
  expect(text_of(values.at(0)) == "ab" && text_of(values.at(1)) == "1" && text_of(values.at(2)) == "22", "append, multi");
  store.queuePush(peer + "q", bytes_of("for " + peer));
  expect(text_of(store.queuePop(me + "q", /*block=*/true)) == "for " + me, "queue_push, blocking queue_pop");
  expect(store.queueLen(me + "q") == 0, "queue_len");
  const auto keys = store.listKeys();
  expect(std::find(keys.begin(), keys.end(), me + "log") != keys.end(), "list_keys");
#else
  std::promise<std::string> changed;
  store.watchKey(me + "watched", [&changed](c10::optional<std::string> old_value, c10::optional<std::string> new_value) {
    changed.set_value((old_value ? *old_value : "-") + ">" + (new_value ? *new_value : "-"));
  });
  store.set(me + "watched", bytes_of("w"));
  auto change = changed.get_future();
  expect(change.wait_for(std::chrono::seconds(30)) == std::future_status::ready && change.get() == "->w", "watchKey");
#endif
  store.set(me + "done", bytes_of("1"));
  store.wait({peer + "done"});  // the peer's keys stay until it has read them
  write_file(out + "/store_ops." + std::to_string(env.rank), "ok");
  return 0;
}

}  // namespace rank_driver
