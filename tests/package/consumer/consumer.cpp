// Trains a small regression with everything a user takes from the installed worker library
// (process group, DDP, sampler, reduce_mean), then checks that every rank holds the same
// parameters, bit for bit. Prints "identical <loss>" on rank 0; exits 1 on a difference.
#include <torch/torch.h>

#include <cstdio>
#include <cstring>

#include "ddprun/collectives.hpp"
#include "ddprun/ddp.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/process_group.hpp"

namespace {

int train(int, char**) {
  auto comm = ddprun::init_process_group();
  torch::manual_seed(100 + comm->rank());  // different initial replicas: DDP must unify them
  auto net = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 1));
  ddprun::DistributedDataParallel ddp(net.ptr(), comm);
  torch::optim::SGD opt(net->parameters(), 0.05);

  const auto x = torch::randn({256, 8}, at::detail::createCPUGenerator(7));
  const auto y = x.sum(1, /*keepdim=*/true);
  ddprun::DistributedSampler sampler({x.size(0), comm->size(), comm->rank()});
  torch::Tensor loss;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    sampler.set_epoch(epoch);
    sampler.reset();
    while (auto indices = sampler.next(16)) {
      const auto idx = torch::tensor(std::vector<int64_t>(indices->begin(), indices->end()));
      opt.zero_grad();
      loss = torch::mse_loss(ddp.forward([&] { return net->forward(x.index_select(0, idx)); }), y.index_select(0, idx));
      loss.backward();
      opt.step();
    }
  }
  auto mean_loss = loss.detach().clone();
  ddprun::reduce_mean(*comm, mean_loss);

  std::vector<torch::Tensor> flat;
  for (const auto& p : net->parameters()) flat.push_back(p.detach().reshape(-1));
  const auto mine = torch::cat(flat).contiguous();
  for (const auto& theirs : ddprun::all_gather(*comm, mine)) {
    if (std::memcmp(theirs.data_ptr(), mine.data_ptr(), mine.nbytes()) != 0) {
      std::printf("rank %d: parameters differ from another rank's\n", comm->rank());
      return 1;
    }
  }
  if (comm->rank() == 0) std::printf("identical %.4f\n", mean_loss.item<double>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddprun::run_main(argc, argv, train); }
