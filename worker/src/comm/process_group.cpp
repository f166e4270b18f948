#include "ddprun/process_group.hpp"

#include <fmt/format.h>

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "backends.hpp"
#include "error_text.hpp"

namespace ddprun {

namespace {

// The store the ranks meet at. Under the launcher's store, PyTorch 1.x's workers use this
// prefix, so that keys of a restarted attempt never collide with the previous one's (ddprun
// empties its store between attempts anyway; torchrun 1.x does not).
c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, const Timeouts& timeouts) {
  c10d::TCPStoreOptions options;
  options.port = env.master_port;
  options.timeout = timeouts.store;
  if (env.use_agent_store) {
    options.isServer = false;
    options.waitWorkers = false;
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    return c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(env.restart_count), store);
  }
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

bool use_nccl(const ProcessGroupOptions& options) {
  return options.backend == Backend::kNccl ||
         (options.backend == Backend::kAuto && options.device == c10::kCUDA);
}

std::shared_ptr<Comm> connect_ranks(const LaunchEnv& env, const ProcessGroupOptions& options,
                                    c10::Device device) {
  const auto store = connect_store(env, options.timeouts);
  if (use_nccl(options)) {
#ifdef USE_C10D_NCCL
    return detail::make_nccl_comm(store, env.rank, env.world_size, env.local_rank,
                                  options.timeouts.collective);
#else
    throw ProcessGroupError(
        "the nccl backend was requested but this libtorch has no NCCL (it was built without "
        "CUDA); use gloo, or build against a CUDA libtorch");
#endif
  }
  return detail::make_gloo_comm(store, env.rank, env.world_size, device, options.timeouts.collective,
                                options.check_collectives);
}

}  // namespace

bool ProcessGroupOptions::check_collectives_from_env(const EnvLookup& env) {
  const auto value = env(kCheckCollectivesEnv);
  if (!value || *value == "1") return true;
  if (*value == "0") return false;
  throw LaunchEnvError(kCheckCollectivesEnv,
                       fmt::format("environment variable {}='{}' is not 0 (checks off) or 1 (on)",
                                   kCheckCollectivesEnv, value->substr(0, 40)));
}

std::shared_ptr<Comm> init_process_group(const LaunchEnv& env, const ProcessGroupOptions& options) {
  line_buffer_stdout();
  if (options.device != c10::kCPU && options.device != c10::kCUDA) {
    throw ProcessGroupError(std::string("unsupported device type ") +
                            c10::DeviceTypeName(options.device) + "; use cpu or cuda");
  }
  if (options.device == c10::kCUDA && !at::hasCUDA()) {
    throw ProcessGroupError(
        "device cuda was requested but this libtorch was built without CUDA or no GPU is "
        "visible; use the cpu device");
  }
  if (use_nccl(options) && options.device != c10::kCUDA) {
    throw ProcessGroupError("the nccl backend works on CUDA tensors only; use device cuda, or gloo");
  }
  c10::Device device(c10::kCPU);
  if (options.device == c10::kCUDA) {
    // The generic device guard interface: no CUDA headers, so this file builds everywhere.
    const auto* cuda = c10::impl::getDeviceGuardImpl(c10::kCUDA);
    const int gpus = cuda->deviceCount();
    int index = env.local_rank;
    if (options.backend == Backend::kGloo) {
      index %= gpus;  // local ranks take turns on the GPUs
    } else if (index >= gpus) {
      throw ProcessGroupError(fmt::format(
          "local rank {} has no GPU of its own ({} visible): NCCL needs one GPU per rank; start at "
          "most {} workers per node, or choose the gloo backend to share GPUs", env.local_rank, gpus, gpus));
    }
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    cuda->setDevice(device);
  }
  if (env.world_size == 1 && options.solo_when_alone) {
    return detail::make_solo_comm(device, options.timeouts.collective);
  }
  try {
    return connect_ranks(env, options, device);
  } catch (const ProcessGroupError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
    const std::string role =
        env.use_agent_store ? "as a client of the launcher's store"
        : env.rank == 0     ? "as the host of the store"
                            : "as a client of rank 0's store";
    throw ProcessGroupError(fmt::format(
        "rank {} of {} could not join the job at {} {} (store timeout {}; raise {} if ranks "
        "start slowly): {}",
        env.rank, env.world_size, where, role, detail::seconds_text(options.timeouts.store),
        kStoreTimeoutEnv, detail::exception_text(e)));
  }
}

std::shared_ptr<Comm> init_process_group(const ProcessGroupOptions& options) {
  return init_process_group(launch_env_from_process(), options);
}

}  // namespace ddprun
