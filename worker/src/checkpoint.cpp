#include "ddprun/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>
#include <torch/serialize/archive.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "ddprun/collectives.hpp"

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

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error("cannot open", path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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

}  // namespace

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

void Checkpointer::save(int64_t step, const torch::nn::Module& module,
                        const torch::optim::Optimizer& optimizer) {
  if (comm_->rank() != 0) return;
  torch::serialize::OutputArchive archive;
  archive.write("step", at::scalar_tensor(step, at::kLong), /*is_buffer=*/true);
  torch::serialize::OutputArchive model;
  module.save(model);
  archive.write("model", model);
  torch::serialize::OutputArchive optim;
  optimizer.save(optim);
  archive.write("optimizer", optim);
  std::ostringstream bytes;
  archive.save_to(bytes);

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw std::runtime_error("checkpoint: cannot create " + dir_.string() + ": " + ec.message());
  const fs::path final_path = dir_ / checkpoint_file_name(step);
  const fs::path tmp_path = dir_ / ("." + checkpoint_file_name(step) + ".tmp." + std::to_string(::getpid()));
  write_durably(tmp_path, bytes.str());
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

std::optional<int64_t> Checkpointer::load_latest(torch::nn::Module& module,
                                                 torch::optim::Optimizer& optimizer) {
  std::string bytes;
  if (comm_->rank() == 0) {
    if (auto step = newest_checkpoint(list_names(dir_))) bytes = read_file(dir_ / checkpoint_file_name(*step));
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

  torch::serialize::InputArchive archive;
  // Rank 0 may have saved from another GPU than this rank's.
  archive.load_from(bytes.data(), bytes.size(), comm_->device());
  at::Tensor step;
  archive.read("step", step, /*is_buffer=*/true);
  torch::serialize::InputArchive model;
  archive.read("model", model);
  module.load(model);
  torch::serialize::InputArchive optim;
  archive.read("optimizer", optim);
  optimizer.load(optim);
  return step.item<int64_t>();
}

}  // namespace ddprun
