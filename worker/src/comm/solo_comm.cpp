// The communicator of a process that runs alone: world size 1, nothing to exchange.
#include <ATen/ops/clone.h>

#include "backends.hpp"

namespace ddprun::detail {

namespace {

class DonePendingOp : public PendingOp {
 public:
  void wait() override {}
};

class SoloComm : public Comm {
 public:
  SoloComm(c10::Device device, std::chrono::milliseconds timeout)
      : device_(device), timeout_(timeout) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "solo"; }
  c10::Device device() const override { return device_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::unique_ptr<PendingOp> start_all_reduce(at::Tensor, ReduceOp) override {
    return std::make_unique<DonePendingOp>();
  }
  void broadcast(at::Tensor, int) override {}
  std::vector<at::Tensor> all_gather(const at::Tensor& flat) override { return {flat.clone()}; }
  void barrier() override {}
  void check_agreement(const CollectiveCall&) override {}
  bool healthy() const override { return true; }

 private:
  c10::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<Comm> make_solo_comm(c10::Device device, std::chrono::milliseconds timeout) {
  return std::make_shared<SoloComm>(device, timeout);
}

}  // namespace ddprun::detail
