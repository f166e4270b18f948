// The gloo communicator: CPU tensors over TCP.
#include <cstdlib>
#include <sstream>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "backends.hpp"
#include "c10d_comm.hpp"

#ifndef USE_C10D_GLOO
#error "this libtorch was built without gloo (USE_C10D_GLOO); the worker library needs it"
#endif

namespace ddprun::detail {

namespace {

// PyTorch's variable naming the network interfaces gloo binds to (comma-separated).
constexpr const char* kGlooSocketIfnameEnv = "GLOO_SOCKET_IFNAME";

// gloo enforces the collective timeout itself on every transfer. The wait on the CPU side adds
// this margin on top, as a second line of defence: no transport bug can make us wait forever.
constexpr std::chrono::milliseconds kWaitMargin{std::chrono::seconds(10)};

class GlooComm : public C10dComm {
 public:
  using C10dComm::C10dComm;

 protected:
  void wait_work(c10d::Work& work) override { work.wait(timeout() + kWaitMargin); }
};

// Same choice as PyTorch's ProcessGroupGloo binding: the interfaces in GLOO_SOCKET_IFNAME, or
// the address this host's name resolves to (loopback if it does not resolve).
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices() {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  const char* ifnames = std::getenv(kGlooSocketIfnameEnv);
  if (ifnames != nullptr && *ifnames != '\0') {
    std::istringstream in(ifnames);
    for (std::string name; std::getline(in, name, ',');) {
      if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
  }
  if (devices.empty()) devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

}  // namespace

std::shared_ptr<Comm> make_gloo_comm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices = gloo_devices();
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return std::make_shared<GlooComm>(std::move(pg), rank, size, c10::Device(c10::kCPU), timeout,
                                    "gloo");
}

}  // namespace ddprun::detail
