#include "ddprun/checkpoint.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "ddprun/collectives.hpp"
#include "ddprun/system.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void io_error(const std::string& what, const fs::path& path) {
  throw std::runtime_error("checkpoint: " + what + " " + path.string() + ": " + std::strerror(errno));
}

// Writes `data` to `path` and makes it durable, so that the rename that follows never
// publishes a file whose content is still only in the page cache.
void write_durably(const fs::path& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", path);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      io_error("cannot write", path);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_error("cannot fsync", path);
  }
  if (::close(fd) != 0) io_error("cannot close", path);
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The whole file; throws (naming it and errno's reason) when it cannot be opened.
std::string read_whole(const fs::path& path) {
  std::optional<std::string> bytes = read_file(path.string());
  if (!bytes) io_error("cannot open", path);
  return std::move(*bytes);
}

const std::regex& checkpoint_name_pattern() {
  static const std::regex pattern(R"(checkpoint-([0-9]{1,18})\.pt)");
  return pattern;
}

std::vector<std::string> list_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// ".checkpoint-<step>.pt.tmp.<host>.<pid>": the writer's host and pid, so that a temp file left
// by a writer that was killed mid-save is recognised as stale.
fs::path temp_path(const fs::path& dir, int64_t step) {
  return dir / ("." + checkpoint_file_name(step) + ".tmp." + host_name() + "." + std::to_string(::getpid()));
}

// Removes the temp files of writers on this host that no longer run (killed during a save).
// Files of other hosts are left alone: their writers cannot be checked from here.
void remove_stale_temp_files(const fs::path& dir) {
  const std::string host = host_name();
  for (const auto& name : list_names(dir)) {
    const auto at = name.find(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    const std::string writer = name.substr(at + 5);  // "<host>.<pid>", or "<pid>" before 0.x
    const auto dot = writer.rfind('.');
    const std::string writer_host = dot == std::string::npos ? host : writer.substr(0, dot);
    const std::string pid_text = dot == std::string::npos ? writer : writer.substr(dot + 1);
    char* end = nullptr;
    const long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (writer_host != host || pid_text.empty() || *end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code ignored;
    fs::remove(dir / name, ignored);
  }
}

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// LRScheduler keeps its step count protected and offers no save/load; this reads and writes it
// through a pointer to member, which a derived class may form for any LRScheduler.
struct SchedulerAccess : torch::optim::LRScheduler {
  static unsigned& step_count(torch::optim::LRScheduler& s) { return s.*(&SchedulerAccess::step_count_); }
};

// The bytes of `archive`, and an archive back from them.
std::string to_bytes(OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

at::Tensor bytes_tensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

[[noreturn]] void missing(const std::string& what) {
  throw std::runtime_error("checkpoint: the newest checkpoint has no " + what +
                           " (it was saved without it); pass CheckpointItems without it, or start afresh");
}

// The default CPU generator and, where a GPU is visible, the current GPU's.
std::vector<std::pair<std::string, at::Generator>> rng_generators() {
  std::vector<std::pair<std::string, at::Generator>> out{{"cpu", at::detail::getDefaultCPUGenerator()}};
  if (at::hasCUDA()) {
    const auto device = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDevice();
    out.emplace_back("cuda", at::globalContext().defaultGenerator(device));
  }
  return out;
}

std::string rng_states() {
  OutputArchive archive;
  for (auto& [name, generator] : rng_generators()) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write(name, generator.get_state(), /*is_buffer=*/true);
  }
  return to_bytes(archive);
}

void restore_rng_states(const std::string& bytes) {
  InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  for (auto& [name, generator] : rng_generators()) {
    at::Tensor state;
    if (!archive.try_read(name, state, /*is_buffer=*/true)) continue;  // saved without a GPU
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
}

// Module::load() replaces every parameter's storage with Tensor::set_(), which drops the
// autograd state that DistributedDataParallel and optimizers hook onto. This copies the saved
// values into the existing tensors instead, as PyTorch's load_state_dict() does.
void load_in_place(torch::nn::Module& module, InputArchive& archive, const std::string& prefix) {
  at::NoGradGuard no_grad;
  const auto copy = [&](const std::string& key, at::Tensor& target, bool is_buffer) {
    at::Tensor saved;
    if (!archive.try_read(key, saved, is_buffer)) missing("entry " + prefix + key + " of the model");
    if (saved.sizes() != target.sizes()) {
      std::ostringstream text;
      text << "checkpoint: " << prefix << key << " is " << saved.sizes() << " in the checkpoint but "
           << target.sizes() << " in the model";
      throw std::runtime_error(text.str());
    }
    target.copy_(saved);
  };
  for (auto& item : module.named_parameters(/*recurse=*/false)) copy(item.key(), item.value(), false);
  for (auto& item : module.named_buffers(/*recurse=*/false)) copy(item.key(), item.value(), true);
  for (const auto& child : module.named_children()) {
    InputArchive sub;
    if (!archive.try_read(child.key(), sub)) missing("entry " + prefix + child.key() + " of the model");
    load_in_place(*child.value(), sub, prefix + child.key() + ".");
  }
}

// Each parameter group's learning rate. libtorch 1.13's Optimizer::load() keeps the options the
// optimizer was constructed with (2.x restores them), so a learning rate that a scheduler had
// lowered would come back at its initial value; these are saved beside the optimizer's state.
at::Tensor learning_rates(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return at::tensor(lrs, at::TensorOptions().dtype(at::kDouble));
}

void set_learning_rates(torch::optim::Optimizer& optimizer, const at::Tensor& lrs) {
  auto& groups = optimizer.param_groups();
  if (lrs.numel() != static_cast<int64_t>(groups.size())) {
    throw std::runtime_error(fmt::format("checkpoint: saved with {} parameter groups, the optimizer has {}",
                                         lrs.numel(), groups.size()));
  }
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[static_cast<int64_t>(i)].item<double>());
}

}  // namespace

fs::path default_checkpoint_dir(const fs::path& fallback, const EnvLookup& lookup) {
  const std::optional<std::string> snapshots = lookup(env::kSnapshotDir);
  if (snapshots && !snapshots->empty()) return *snapshots;
  return fallback;
}

std::string checkpoint_file_name(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%09lld.pt", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> newest_checkpoint(const std::vector<std::string>& file_names) {
  std::optional<int64_t> newest;
  std::smatch match;
  for (const auto& name : file_names) {
    if (!std::regex_match(name, match, checkpoint_name_pattern())) continue;
    const int64_t step = std::stoll(match[1].str());
    if (!newest || step > *newest) newest = step;
  }
  return newest;
}

Checkpointer::Checkpointer(fs::path dir, std::shared_ptr<Comm> comm, int keep_last)
    : dir_(std::move(dir)), comm_(std::move(comm)), keep_last_(keep_last < 1 ? 1 : keep_last) {}

Checkpointer::Checkpointer(std::shared_ptr<Comm> comm, int keep_last)
    : Checkpointer(default_checkpoint_dir(), std::move(comm), keep_last) {}

void Checkpointer::save(int64_t step, const CheckpointItems& items) {
  if (items.model == nullptr) throw std::invalid_argument("Checkpointer::save: CheckpointItems::model is required");
  // The one collective part: rank 0 needs every rank's generators.
  std::vector<std::string> rngs;
  if (items.rng_states) rngs = all_gather_bytes(*comm_, rng_states());
  if (comm_->rank() != 0) return;

  OutputArchive archive;
  archive.write("step", at::scalar_tensor(step, at::kLong), /*is_buffer=*/true);
  OutputArchive model;
  items.model->save(model);
  archive.write("model", model);
  if (items.optimizer != nullptr) {
    OutputArchive optimizer;
    items.optimizer->save(optimizer);
    archive.write("optimizer", optimizer);
    archive.write("learning_rates", learning_rates(*items.optimizer), /*is_buffer=*/true);
  }
  if (items.scheduler != nullptr) {
    OutputArchive scheduler;
    scheduler.write("step_count",
                    at::scalar_tensor(int64_t{SchedulerAccess::step_count(*items.scheduler)}, at::kLong),
                    /*is_buffer=*/true);
    archive.write("scheduler", scheduler);
  }
  if (items.sampler != nullptr) {
    OutputArchive sampler;
    items.sampler->save(sampler);
    archive.write("sampler", sampler);
  }
  if (items.rng_states) {
    OutputArchive rng;
    rng.write("world_size", at::scalar_tensor(int64_t{comm_->size()}, at::kLong), /*is_buffer=*/true);
    for (std::size_t r = 0; r < rngs.size(); ++r) {
      rng.write("rank_" + std::to_string(r), bytes_tensor(rngs[r]), /*is_buffer=*/true);
    }
    archive.write("rng", rng);
  }
  if (items.extra != nullptr) {
    OutputArchive extra;
    std::vector<std::string> names;
    for (const auto& [name, value] : *items.extra) {
      extra.write("value_" + std::to_string(names.size()), value);
      names.push_back(name);
    }
    extra.write("names", c10::IValue(c10::List<std::string>(names)));
    archive.write("extra", extra);
  }
  const std::string bytes = to_bytes(archive);

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw std::runtime_error("checkpoint: cannot create " + dir_.string() + ": " + ec.message());
  const fs::path final_path = dir_ / checkpoint_file_name(step);
  remove_stale_temp_files(dir_);
  const fs::path tmp_path = temp_path(dir_, step);
  write_durably(tmp_path, bytes);
  if (std::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp_path.c_str());
    io_error("cannot rename into", final_path);
  }
  fsync_dir(dir_);

  std::vector<int64_t> steps;
  std::smatch match;
  for (const auto& name : list_names(dir_)) {
    if (std::regex_match(name, match, checkpoint_name_pattern())) steps.push_back(std::stoll(match[1].str()));
  }
  std::sort(steps.begin(), steps.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last_) < steps.size(); ++i) {
    fs::remove(dir_ / checkpoint_file_name(steps[i]), ec);
  }
}

std::optional<int64_t> Checkpointer::load_latest(const CheckpointItems& items) {
  if (items.model == nullptr) throw std::invalid_argument("Checkpointer::load_latest: CheckpointItems::model is required");
  std::string bytes;
  if (comm_->rank() == 0) {
    remove_stale_temp_files(dir_);  // left by a rank 0 killed during a save, before this restart
    if (auto step = newest_checkpoint(list_names(dir_))) bytes = read_whole(dir_ / checkpoint_file_name(*step));
  }
  const auto on_device = at::TensorOptions().device(comm_->device());
  at::Tensor length = at::scalar_tensor(static_cast<int64_t>(bytes.size()), on_device.dtype(at::kLong));
  broadcast(*comm_, length, 0);
  const int64_t size = length.cpu().item<int64_t>();
  if (size == 0) return std::nullopt;

  if (comm_->size() > 1) {
    at::Tensor payload = at::empty({size}, at::TensorOptions().dtype(at::kByte));
    if (comm_->rank() == 0) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
    payload = payload.to(comm_->device());
    broadcast(*comm_, payload, 0);
    payload = payload.cpu();
    bytes.assign(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(size));
  }

  InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  at::Tensor step;
  archive.read("step", step, /*is_buffer=*/true);
  InputArchive model;
  archive.read("model", model);
  load_in_place(*items.model, model, "");
  if (items.optimizer != nullptr) {
    InputArchive optimizer;
    if (!archive.try_read("optimizer", optimizer)) missing("optimizer state");
    items.optimizer->load(optimizer);
    at::Tensor lrs;
    if (archive.try_read("learning_rates", lrs, /*is_buffer=*/true)) set_learning_rates(*items.optimizer, lrs);
  }
  if (items.scheduler != nullptr) {
    InputArchive scheduler;
    at::Tensor count;
    if (!archive.try_read("scheduler", scheduler) || !scheduler.try_read("step_count", count, true)) {
      missing("learning-rate scheduler");
    }
    SchedulerAccess::step_count(*items.scheduler) = static_cast<unsigned>(count.item<int64_t>());
  }
  if (items.sampler != nullptr) {
    InputArchive sampler;
    if (!archive.try_read("sampler", sampler)) missing("sampler position");
    items.sampler->load(sampler);
  }
  if (items.rng_states) {
    InputArchive rng;
    at::Tensor world;
    if (!archive.try_read("rng", rng) || !rng.try_read("world_size", world, true)) missing("random number generator states");
    at::Tensor mine;
    if (world.item<int64_t>() == comm_->size() &&
        rng.try_read("rank_" + std::to_string(comm_->rank()), mine, /*is_buffer=*/true)) {
      restore_rng_states(std::string(static_cast<const char*>(mine.data_ptr()), static_cast<std::size_t>(mine.numel())));
    } else if (comm_->rank() == 0) {
      std::cerr << "checkpoint: saved by " << world.item<int64_t>() << " ranks, now " << comm_->size()
                << ": the random number generators are not restored\n";
    }
  }
  if (items.extra != nullptr) {
    InputArchive extra;
    if (!archive.try_read("extra", extra)) missing("extra entries");
    c10::IValue names;
    extra.read("names", names);
    items.extra->clear();
    std::size_t i = 0;
    for (const auto& name : names.toList()) {
      c10::IValue value;
      extra.read("value_" + std::to_string(i++), value);
      (*items.extra)[name.get().toStringRef()] = value;
    }
  }
  return step.item<int64_t>();
}

void Checkpointer::save(int64_t step, const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) {
  CheckpointItems items;
  // save() only reads them; CheckpointItems holds non-const pointers because load_latest() writes.
  items.model = const_cast<torch::nn::Module*>(&model);
  items.optimizer = const_cast<torch::optim::Optimizer*>(&optimizer);
  items.rng_states = false;
  save(step, items);
}

std::optional<int64_t> Checkpointer::load_latest(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  CheckpointItems items;
  items.model = &model;
  items.optimizer = &optimizer;
  items.rng_states = false;
  return load_latest(items);
}

}  // namespace ddprun
