// One rank of tests/worker/powersgd_test.sh, started by ddprun: DDP training with
// ddprun::powerSGD_hook of a model with compressed layers, a layer too small to compress, 1-D
// biases and two weights of the same shape. Weights and data come from formulas that
// powersgd_reference.py repeats in Python.
//
//   powersgd_driver OUT CONFIG STEPS
//     CONFIG: comma-separated key=value, all required: rank (matrix_approximation_rank), start
//     (start_powerSGD_iter), rate (min_compression_rate), ef (use_error_feedback 0|1), warm
//     (warm_start 0|1), eps (orthogonalization_epsilon), seed (random_seed), freq
//     (compression_stats_logging_frequency), batch (batch_tensors_with_same_shape 0|1), cap
//     (every bucket's cap in bytes, 0: the defaults)
//   Writes OUT/params.<rank> (%.9g, one a line), OUT/stats.<rank> (state iter and compression
//   statistics) and OUT/log.<rank> (the compression statistics lines).
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "ddprun/ddp.hpp"
#include "ddprun/powersgd_hook.hpp"
#include "ddprun/process_group.hpp"
#include "driver_formulas.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::cerr << "powersgd_driver: " << what << "\n";
  std::exit(1);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) die("cannot write " + path);
}

std::map<std::string, std::string> parse_config(const std::string& config) {
  std::map<std::string, std::string> c;
  std::istringstream in(config);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) die("bad CONFIG item: " + item);
    c[item.substr(0, eq)] = item.substr(eq + 1);
  }
  for (const char* key : {"rank", "start", "rate", "ef", "warm", "eps", "seed", "freq", "batch", "cap"}) {
    if (!c.count(key)) die(std::string("CONFIG lacks ") + key);
  }
  return c;
}

int run(const std::string& out, const std::string& config, int steps) {
  const auto c = parse_config(config);
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  auto net = torch::nn::Sequential(torch::nn::Linear(10, 12), torch::nn::Tanh(), torch::nn::Linear(12, 12),
                                   torch::nn::Tanh(), torch::nn::Linear(12, 12), torch::nn::Tanh(),
                                   torch::nn::Linear(12, 2));
  driver_formulas::init_weights(*net);
  ddprun::DdpOptions ddp_options;
  if (const double cap = std::stod(c.at("cap")); cap > 0) {
    ddp_options.bucket_cap_mb = cap / 1048576;
    ddp_options.first_bucket_cap_mb = cap / 1048576;
  }
  ddprun::DistributedDataParallel ddp(net.ptr(), comm, ddp_options);

  ddprun::PowerSGDOptions o;
  o.matrix_approximation_rank = std::stoi(c.at("rank"));
  o.start_powerSGD_iter = std::stoll(c.at("start"));
  o.min_compression_rate = std::stod(c.at("rate"));
  o.use_error_feedback = c.at("ef") == "1";
  o.warm_start = c.at("warm") == "1";
  o.orthogonalization_epsilon = std::stod(c.at("eps"));
  o.random_seed = static_cast<uint32_t>(std::stoul(c.at("seed")));
  o.compression_stats_logging_frequency = std::stoll(c.at("freq"));
  o.batch_tensors_with_same_shape = c.at("batch") == "1";
  std::string log;
  o.log = [&log](const std::string& line) { log += line + "\n"; };
  auto state = std::make_shared<ddprun::PowerSGDState>(o);
  ddp.register_comm_hook(ddprun::powerSGD_hook(state));

  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int s = 0; s < steps; ++s) driver_formulas::step(ddp, net, opt, r, s, 10, 2);

  std::ostringstream params;
  for (const auto& p : net->parameters()) {
    const auto flat = p.detach().flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      char line[32];
      std::snprintf(line, sizeof line, "%.9g\n", flat[i].item<float>());
      params << line;
    }
  }
  const std::string rank = std::to_string(r);
  write_file(out + "/params." + rank, params.str());
  const auto stats = state->compression_stats();
  write_file(out + "/stats." + rank, "iter " + std::to_string(state->iter()) + "\nbefore " +
                                         std::to_string(stats.numel_before) + "\nafter " +
                                         std::to_string(stats.numel_after) + "\n");
  write_file(out + "/log." + rank, log);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) die("usage: powersgd_driver OUT CONFIG STEPS");
  try {
    return run(argv[1], argv[2], std::stoi(argv[3]));
  } catch (const std::exception& e) {
    die(e.what());
  }
}
