// The example training program: a small MLP learns a synthetic classification task with
// every piece of the worker library in use. Run it alone (world size 1) or under a launcher:
//
//   ddprun --nproc_per_node=2 build/worker/train --epochs 5 --checkpoint-dir /tmp/ckpt
//   ddprun --nproc_per_node=2 --max_restarts=3 build/worker/train --epochs 5 --snapshots
//
// With --checkpoint-dir (or --snapshots: ddprun's DDPRUN_SNAPSHOT_DIR, in memory), a restarted
// job resumes from the last completed epoch and ends with the same parameters as an
// uninterrupted run; --crash-at-step lets tests prove it.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "ddprun/checkpoint.hpp"
#include "ddprun/collectives.hpp"
#include "ddprun/ddp.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/launch_env.hpp"
#include "ddprun/process_group.hpp"

namespace {

constexpr int64_t kFeatures = 32;
constexpr int64_t kHidden = 64;
constexpr int64_t kClasses = 4;

struct Flags {
  int epochs = 5;
  int64_t batch_size = 32;
  double lr = 0.05;
  std::string device = "cpu";
  int64_t samples = 4096;
  int64_t val_samples = 1024;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  bool snapshots = false;
  int64_t crash_at_step = -1;
  bool crash_with_sigkill = false;
  int crash_rank = 0;
  int64_t pause_at_step = -1;
  std::string pause_until;
  std::string save_params;
};

// Inputs drawn from N(0, 1); labels from a fixed random linear "teacher", so the task is
// learnable and every process builds the same data from the seed alone.
class SyntheticDataset : public torch::data::datasets::Dataset<SyntheticDataset> {
 public:
  SyntheticDataset(int64_t size, uint64_t seed) {
    auto teacher_gen = at::detail::createCPUGenerator(12345);
    const auto teacher = torch::randn({kFeatures, kClasses}, teacher_gen);
    auto gen = at::detail::createCPUGenerator(seed);
    inputs_ = torch::randn({size, kFeatures}, gen);
    labels_ = inputs_.matmul(teacher).argmax(1);
  }
  torch::data::Example<> get(size_t index) override {
    return {inputs_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(inputs_.size(0)); }

 private:
  torch::Tensor inputs_;
  torch::Tensor labels_;
};

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kHidden, kClasses));
}

// FNV-1a over the bytes of every parameter: equal runs print equal checksums.
uint64_t checksum(const torch::nn::Module& module) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : module.parameters()) {
    const auto c = p.detach().cpu().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

// One line per parameter: its name, then every value with enough digits to round-trip.
void save_params(const torch::nn::Module& module, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write --save-params file " + path);
  for (const auto& item : module.named_parameters()) {
    const auto c = item.value().detach().cpu().contiguous().to(torch::kFloat);
    out << item.key();
    const float* v = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) out << ' ' << fmt::format("{:.9g}", v[i]);
    out << '\n';
  }
}

int run(int argc, char** argv) {
  Flags f;
  CLI::App app{"ddprun's example training program: an MLP on synthetic data, with DDP"};
  app.add_option("--epochs", f.epochs, "epochs to train")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", f.batch_size, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option("--lr", f.lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--device", f.device, "cpu, or cuda (GPU LOCAL_RANK; needs a CUDA libtorch)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--samples", f.samples, "training set size")->check(CLI::PositiveNumber);
  app.add_option("--val-samples", f.val_samples, "validation set size")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed, "seed of the data, the model and the shuffles");
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "save a checkpoint after every epoch here and resume from the newest one");
  app.add_flag("--snapshots", f.snapshots,
               "the same in the folder a Checkpointer given none uses: DDPRUN_SNAPSHOT_DIR under ddprun "
               "(in memory, kept across restarts), else ./checkpoints")
      ->excludes("--checkpoint-dir");
  app.add_option("--crash-at-step", f.crash_at_step,
                 "test hook: throw at this global step (counted from 1), on the first attempt only");
  app.add_option("--crash-rank", f.crash_rank, "test hook: the rank that crashes");
  app.add_flag("--crash-with-sigkill", f.crash_with_sigkill,
               "test hook: the crash is a SIGKILL of the process, not an exception");
  app.add_option("--pause-at-step", f.pause_at_step,
                 "test hook: every rank stops before this global step and sleeps until it is killed, unless "
                 "the --pause-until file exists (a test kills a node while the job stands at a known step)");
  app.add_option("--pause-until", f.pause_until, "test hook: the file that lets --pause-at-step go on")
      ->needs("--pause-at-step");
  app.add_option("--save-params", f.save_params, "rank 0 writes the final parameters here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const ddprun::LaunchEnv env = ddprun::launch_env_from_process();
  ddprun::ProcessGroupOptions pg_options;
  pg_options.device = f.device == "cuda" ? c10::kCUDA : c10::kCPU;
  const auto comm = ddprun::init_process_group(env, pg_options);
  const torch::Device device = comm->device();
  const bool leader = comm->rank() == 0;
  auto log = [&](const std::string& line) {
    if (leader) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  };

  torch::manual_seed(f.seed);
  auto net = make_model();
  net->to(device);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(f.lr).momentum(0.9));

  ddprun::DistributedDataParallel ddp(net.ptr(), comm);

  // The best validation loss so far travels in the checkpoint with the model and optimizer.
  std::map<std::string, c10::IValue> extra{{"best_val_loss", std::numeric_limits<double>::infinity()}};
  ddprun::CheckpointItems items{net.ptr().get(), &optimizer};
  items.extra = &extra;
  int start_epoch = 0;
  std::optional<ddprun::Checkpointer> checkpointer;
  if (!f.checkpoint_dir.empty() || f.snapshots) {
    if (f.snapshots) {
      checkpointer.emplace(comm);
    } else {
      checkpointer.emplace(f.checkpoint_dir, comm);
    }
    // After the wrapper exists, as PyTorch users load into ddp.module: loaded in place.
    if (auto done = checkpointer->load_latest(items)) start_epoch = static_cast<int>(*done);
  }

  ddprun::SamplerSpec spec{f.samples, comm->size(), comm->rank(), /*shuffle=*/true, f.seed, false};
  ddprun::DistributedSampler sampler(spec);
  auto train_data = SyntheticDataset(f.samples, f.seed).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader(
      std::move(train_data), sampler, torch::data::DataLoaderOptions().batch_size(f.batch_size));

  ddprun::SamplerSpec val_spec{f.val_samples, comm->size(), comm->rank(), /*shuffle=*/false, 0, false};
  auto val_data = SyntheticDataset(f.val_samples, f.seed + 1).map(torch::data::transforms::Stack<>());
  auto val_loader = torch::data::make_data_loader(
      std::move(val_data), ddprun::DistributedSampler(val_spec),
      torch::data::DataLoaderOptions().batch_size(f.batch_size));

  const int64_t steps_per_epoch =
      (static_cast<int64_t>(sampler.size()) + f.batch_size - 1) / f.batch_size;
  log(fmt::format("train: world size {} ({}), {} samples, batch {} per rank, {} steps/epoch, "
                  "{} epochs, {}",
                  comm->size(), comm->backend(), f.samples, f.batch_size, steps_per_epoch,
                  f.epochs, device.str()));
  if (checkpointer) log("train: checkpoints in " + checkpointer->dir().string());
  if (start_epoch > 0) {
    log(fmt::format("resumed from the checkpoint after epoch {} (attempt {}; best val_loss {:.4f})",
                    start_epoch, env.restart_count, extra.at("best_val_loss").toDouble()));
  }

  for (int epoch = start_epoch; epoch < f.epochs; ++epoch) {
    const auto started = std::chrono::steady_clock::now();
    sampler.set_epoch(epoch);
    net->train();
    double loss_sum = 0;
    int64_t batches = 0;
    int64_t step = static_cast<int64_t>(epoch) * steps_per_epoch;
    for (auto& batch : *loader) {
      ++step;
      if (step == f.crash_at_step && comm->rank() == f.crash_rank && env.restart_count == 0) {
        if (f.crash_with_sigkill) {
          std::printf("train: SIGKILL at step %lld on rank %d (--crash-with-sigkill)\n", static_cast<long long>(step), comm->rank());
          std::fflush(stdout);
          ::kill(::getpid(), SIGKILL);
        }
        throw std::runtime_error(fmt::format("injected crash at step {} on rank {} (--crash-at-step)",
                                             step, comm->rank()));
      }
      if (step == f.pause_at_step && (f.pause_until.empty() || ::access(f.pause_until.c_str(), F_OK) != 0)) {
        std::printf("train: paused before step %lld on rank %d (pid %d)\n", static_cast<long long>(step), comm->rank(),
                    static_cast<int>(::getpid()));
        std::fflush(stdout);
        for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      const auto x = batch.data.to(device);
      const auto y = batch.target.to(device);
      const auto out = ddp.forward([&] { return net->forward(x); });
      const auto loss = torch::nn::functional::cross_entropy(out, y);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    auto train_loss = torch::tensor(loss_sum / static_cast<double>(batches), torch::kDouble).to(device);
    ddprun::reduce_mean(*comm, train_loss);

    net->eval();
    double val_sum = 0;
    int64_t val_batches = 0;
    {
      torch::NoGradGuard no_grad;
      for (auto& batch : *val_loader) {
        const auto out = net->forward(batch.data.to(device));
        val_sum += torch::nn::functional::cross_entropy(out, batch.target.to(device)).item<double>();
        ++val_batches;
      }
    }
    auto val_loss = torch::tensor(val_sum / static_cast<double>(val_batches), torch::kDouble).to(device);
    ddprun::reduce_mean(*comm, val_loss);

    extra["best_val_loss"] = std::min(extra.at("best_val_loss").toDouble(), val_loss.item<double>());
    if (checkpointer) checkpointer->save(epoch + 1, items);  // epochs completed
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    log(fmt::format("epoch {}/{}  loss {:.4f}  val_loss {:.4f}  {:.2f} s", epoch + 1, f.epochs,
                    train_loss.item<double>(), val_loss.item<double>(), seconds));
  }

  log(fmt::format("done: parameter checksum {:016x}", checksum(*net)));
  if (leader && !f.save_params.empty()) save_params(*net, f.save_params);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddprun::run_main(argc, argv, run); }
