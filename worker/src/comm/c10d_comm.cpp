#include "c10d_comm.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "ddprun/timeouts.hpp"
#include "error_text.hpp"

namespace ddprun::detail {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  throw std::invalid_argument("unknown ReduceOp");
}

class C10dPendingOp : public PendingOp {
 public:
  C10dPendingOp(std::shared_ptr<C10dComm> comm, c10::intrusive_ptr<c10d::Work> work,
                std::vector<at::Tensor> tensors, Clock::time_point started)
      : comm_(std::move(comm)), work_(std::move(work)), tensors_(std::move(tensors)),
        started_(started) {}

  void wait() override { comm_->finish("all_reduce", *work_, started_, /*block_cpu=*/false); }

 private:
  std::shared_ptr<C10dComm> comm_;
  c10::intrusive_ptr<c10d::Work> work_;
  // c10d takes the tensor list by reference; it must outlive the operation.
  std::vector<at::Tensor> tensors_;
  Clock::time_point started_;
};

const char* reduce_op_name(int64_t op) {
  switch (static_cast<ReduceOp>(op)) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

bool same_call(const CollectiveCall& a, const CollectiveCall& b) {
  return a.kind == b.kind && a.numel == b.numel && a.dtype == b.dtype && a.detail == b.detail;
}

// "1", "0-2", "1, 3": ranks in ascending order, runs joined.
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBroadcastTensors: return "broadcast_tensors";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kAllGatherBytes: return "all_gather_bytes";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kDdpBackward: return "DistributedDataParallel backward";
  }
  return "unknown collective";
}

std::optional<std::string> describe_disagreement(const std::vector<CollectiveCall>& calls) {
  std::vector<std::pair<CollectiveCall, std::vector<int>>> groups;
  for (std::size_t r = 0; r < calls.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return same_call(g.first, calls[r]); });
    if (it == groups.end()) {
      groups.push_back({calls[r], {static_cast<int>(r)}});
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  if (groups.size() <= 1) return std::nullopt;
  std::string text = "the ranks are not making the same collective call:";
  for (const auto& [call, ranks] : groups) {
    text += fmt::format(" rank{} {}: {};", ranks.size() == 1 ? "" : "s", rank_list(ranks), describe(call));
  }
  text.back() = '.';
  text += " Every rank must make the same collective calls in the same order (did some ranks run "
          "one more backward(), reduce_mean() or barrier() than the others, or see other "
          "shapes?)";
  return text;
}

bool looks_like_timeout(const std::string& backend_message, double elapsed_s,
                        std::chrono::milliseconds timeout) {
  const double timeout_s = static_cast<double>(timeout.count()) / 1000.0;
  // gloo says "Timed out waiting ...", c10d's Work says "Operation timed out!", NCCL's watchdog
  // "Watchdog caught collective operation timeout". The elapsed time covers any other wording.
  return backend_message.find("imed out") != std::string::npos ||
         backend_message.find("timeout") != std::string::npos || elapsed_s >= 0.9 * timeout_s;
}

std::string describe_comm_failure(const char* op, int rank, int size, bool timed_out,
                                  double elapsed_s, std::chrono::milliseconds timeout,
                                  const std::string& backend_message) {
  if (timed_out) {
    return fmt::format(
        "{} timed out on rank {} of {} after {:.1f} s (collective timeout {}): a peer is hung or "
        "unreachable; if it is only slow, raise {} or Timeouts::collective [backend: {}]",
        op, rank, size, elapsed_s, seconds_text(timeout), kCollectiveTimeoutEnv, backend_message);
  }
  return fmt::format(
      "{} failed on rank {} of {} after {:.1f} s (collective timeout {}): a peer died or closed "
      "its connection [backend: {}]",
      op, rank, size, elapsed_s, seconds_text(timeout), backend_message);
}

C10dComm::C10dComm(c10::intrusive_ptr<compat::ProcessGroupBase> pg, int rank, int size,
                   c10::Device device, std::chrono::milliseconds timeout, std::string backend,
                   bool check_collectives)
    : pg_(std::move(pg)), rank_(rank), size_(size), device_(device), timeout_(timeout),
      backend_(std::move(backend)), check_collectives_(check_collectives) {}

void C10dComm::check_healthy(const char* op) const {
  if (healthy_.load()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw CommError(fmt::format(
      "{} refused on rank {} of {}: the process group is unusable after an earlier failure: {}",
      op, rank_, size_, first_error_));
}

void C10dComm::fail(const char* op, const std::exception& error, Clock::time_point started) {
  const double elapsed = seconds_since(started);
  const std::string text = exception_text(error);
  const std::string message = describe_comm_failure(
      op, rank_, size_, looks_like_timeout(text, elapsed, timeout_), elapsed, timeout_, text);
  give_up(message);
}

void C10dComm::give_up(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (healthy_.exchange(false)) first_error_ = message;
  }
  throw CommError(message);
}

void C10dComm::finish(const char* op, c10d::Work& work, Clock::time_point started,
                      bool block_cpu) {
  try {
    wait_work(work, block_cpu);
  } catch (const std::exception& e) {
    fail(op, e, started);
  }
}

std::unique_ptr<PendingOp> C10dComm::start_all_reduce(at::Tensor flat, ReduceOp op) {
  check_healthy("all_reduce");
  const auto started = Clock::now();
  std::vector<at::Tensor> tensors{std::move(flat)};
  try {
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    options.timeout = timeout_;
    auto work = pg_->allreduce(tensors, options);
    return std::make_unique<C10dPendingOp>(shared_from_this(), std::move(work), std::move(tensors),
                                           started);
  } catch (const std::exception& e) {
    fail("all_reduce", e, started);
  }
}

void C10dComm::broadcast(at::Tensor flat, int root) {
  check_healthy("broadcast");
  const auto started = Clock::now();
  std::vector<at::Tensor> tensors{std::move(flat)};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = timeout_;
    work = pg_->broadcast(tensors, options);
  } catch (const std::exception& e) {
    fail("broadcast", e, started);
  }
  finish("broadcast", *work, started, /*block_cpu=*/true);
}

std::vector<at::Tensor> C10dComm::all_gather(const at::Tensor& flat) { return gather("all_gather", flat); }

std::vector<at::Tensor> C10dComm::gather(const char* op, const at::Tensor& flat) {
  check_healthy(op);
  const auto started = Clock::now();
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(flat));
  std::vector<at::Tensor> inputs{flat};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    c10d::AllgatherOptions options;
    options.timeout = timeout_;
    work = pg_->allgather(outputs, inputs, options);
  } catch (const std::exception& e) {
    fail(op, e, started);
  }
  finish(op, *work, started, /*block_cpu=*/true);
  return outputs[0];
}

void C10dComm::check_agreement(const CollectiveCall& call) {
  if (!check_collectives_) return;
  // Named after the call being checked: a peer that died shows up here first.
  const std::string what = describe(call);
  check_healthy(what.c_str());
  // Four integers from every rank, the same size whatever the calls: this exchange itself
  // can never be mismatched.
  const at::Tensor mine = at::tensor({static_cast<int64_t>(call.kind), call.numel,
                                      static_cast<int64_t>(call.dtype), call.detail},
                                     at::TensorOptions().dtype(at::kLong))
                              .to(device_);
  std::vector<CollectiveCall> calls;
  for (const at::Tensor& t : gather(what.c_str(), mine)) {
    const at::Tensor c = t.cpu();
    const int64_t* v = c.data_ptr<int64_t>();
    calls.push_back({static_cast<CollectiveKind>(v[0]), v[1], static_cast<c10::ScalarType>(v[2]), v[3]});
  }
  if (auto mismatch = describe_disagreement(calls)) {
    give_up(fmt::format("collective mismatch seen on rank {} of {}: {}", rank_, size_, *mismatch));
  }
}

void C10dComm::barrier() {
  // A one-element all-reduce rather than c10d's barrier(): the NCCL barrier has to guess a
  // device, and gloo's re-raises errors of unrelated earlier operations.
  check_healthy("barrier");
  const auto started = Clock::now();
  std::vector<at::Tensor> tensors{at::zeros({1}, at::TensorOptions().device(device_))};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    c10d::AllreduceOptions options;
    options.timeout = timeout_;
    work = pg_->allreduce(tensors, options);
  } catch (const std::exception& e) {
    fail("barrier", e, started);
  }
  finish("barrier", *work, started, /*block_cpu=*/true);
}

}  // namespace ddprun::detail

namespace ddprun {

std::string describe(const CollectiveCall& call) {
  const char* name = detail::kind_name(call.kind);
  const std::string elements =
      call.dtype == c10::ScalarType::Undefined
          ? fmt::format("{} elements", call.numel)
          : fmt::format("{} {} element{}", call.numel, c10::toString(call.dtype), call.numel == 1 ? "" : "s");
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      return fmt::format("{} ({}) of {}", name, detail::reduce_op_name(call.detail), elements);
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kBroadcastTensors:
      return fmt::format("{} of {} from rank {}", name, elements, call.detail);
    case CollectiveKind::kAllGather:
      return fmt::format("{} of {}", name, elements);
    case CollectiveKind::kAllGatherBytes:
    case CollectiveKind::kBarrier:
      return name;
    case CollectiveKind::kDdpBackward:
      return fmt::format("{} ({} bucket{}, {})", name, call.detail, call.detail == 1 ? "" : "s", elements);
  }
  return name;
}

}  // namespace ddprun
