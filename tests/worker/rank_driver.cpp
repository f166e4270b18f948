// One rank of a worker-library test, started by ddprun (or alone, as world size 1).
//
//   rank_driver collectives OUT [DEVICE BACKEND]
//                                          every collective's result, checked on every rank;
//                                          DEVICE cpu|cuda, BACKEND auto|gloo|nccl (cuda: a real
//                                          process group even at world size 1)
//   rank_driver cuda_devices               prints how many GPUs this libtorch sees, and whether
//                                          it is a CUDA build ("2 cuda-build", "0 cpu-build")
//   rank_driver train OUT TOTAL B STEPS [nosync] [copy_grads] [set_to_none] [replace=HOW]
//                                          SGD on a global batch of TOTAL*B split over the ranks;
//                                          writes OUT/params.<rank>. nosync: half of each batch
//                                          under no_sync(); copy_grads: gradient_as_bucket_view
//                                          off; set_to_none: gradients reset, not zeroed;
//                                          replace: halfway, every rank gives the parameters
//                                          new storage (see replace_parameters); cuda: on the
//                                          GPUs (NCCL); cuda_gloo: on the GPU(s) with gloo
//                                          (ranks may share a GPU)
//   rank_driver compare A B TOL            max |A-B| of two params files; fails above TOL
//   rank_driver peer_dies OUT              rank 1 is SIGKILLed during an all_reduce; rank 0
//                                          writes what it caught and after how long
//   rank_driver peer_hangs OUT [DEVICE BACKEND]
//                                          rank 1 never joins; rank 0 writes what it caught
//                                          (on cuda, of a barrier)
//   rank_driver mismatch OUT               rank 1's model differs; every rank writes the error
//   rank_driver extra_backward             DDP training in which rank 0 runs one backward more
//                                          than the others in step 3; reduce_mean of the loss
//                                          after each step (run under run_main: error file)
//   rank_driver last_words                 prints a line with printf and std::cout, then dies
//                                          of SIGKILL (nothing flushed by hand)
//   rank_driver resume OUT STEPS SAVE_AT [LOAD]
//                                          STEPS steps of training with dropout, momentum, a
//                                          StepLR, a sampler and extra entries, saving a
//                                          checkpoint in OUT after SAVE_AT; with LOAD, first
//                                          resumes from OUT's checkpoint; writes OUT/params.<rank>
//                                          (.resumed with LOAD) and the restored entries
//   rank_driver hooks OUT HOOK STEPS       STEPS of SGD on a small model with the communication
//                                          hook HOOK (none, allreduce, fp16, bf16, fp16_wrapper,
//                                          bf16_wrapper: the wrappers around allreduce); weights
//                                          and data from formulas that hooks_reference.py repeats
//                                          in Python; writes OUT/params.<rank>, and OUT/late.<rank>:
//                                          the error of registering a hook after training
//   rank_driver hang OUT HANG_AT           DDP training; on the first attempt rank 1 stops in
//                                          step HANG_AT inside stuck_loading_batch() while the
//                                          others wait in the next backward's all-reduce; after
//                                          each step every rank writes OUT/lastbeat.<rank> (the
//                                          time its last heartbeat was due) and OUT/step.<rank>.<s>,
//                                          and rank 0 starts step HANG_AT after rank 1's step
//                                          HANG_AT-1; on a restart all ranks train HANG_AT+2 steps
//                                          and exit 0
//   rank_driver sampler                    reads "N W SEED EPOCH DROP_LAST SHUFFLE" lines, prints
//                                          each rank's indices as torch's DistributedSampler would
//   rank_driver store_ops OUT              (2 ranks) every call of libtorch's c10d::TCPStore client
//                                          against the store at MASTER_ADDR:MASTER_PORT (the
//                                          launcher's): the 1.x API with watchKey on libtorch 1.x,
//                                          the extended API on 2.x; writes OUT/store_ops.<rank>

#include "rank_driver.hpp"

namespace rank_driver {

[[noreturn]] void die(const std::string& what) {
  std::cerr << "rank_driver: " << what << "\n";
  std::exit(1);
}

void expect(bool ok, const std::string& what) {
  if (!ok) die("check failed: " + what);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// DEVICE and BACKEND as on the command line: "cpu"/"cuda" and "auto"/"gloo"/"nccl". On cuda the
// process group is a real one even at world size 1, so that a backend can be tested on one GPU.
ddprun::ProcessGroupOptions group_options(const std::string& device, const std::string& backend) {
  ddprun::ProcessGroupOptions options;
  if (device == "cuda") {
    options.device = c10::kCUDA;
    options.solo_when_alone = false;
  } else if (device != "cpu") {
    die("unknown device " + device);
  }
  if (backend == "gloo") {
    options.backend = ddprun::Backend::kGloo;
  } else if (backend == "nccl") {
    options.backend = ddprun::Backend::kNccl;
  } else if (backend != "auto") {
    die("unknown backend " + backend);
  }
  return options;
}

std::string params_text(torch::nn::Module& m) {
  std::ostringstream os;
  os.precision(9);
  for (const auto& p : m.parameters()) {
    auto flat = p.detach().cpu().flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) os << flat[i].item<float>() << "\n";
  }
  return os.str();
}

}  // namespace rank_driver

using namespace rank_driver;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "collectives" && argc == 3) return collectives(argv[2], {});
    if (mode == "collectives" && argc == 5) return collectives(argv[2], group_options(argv[3], argv[4]));
    if (mode == "cuda_devices" && argc == 2) {
#ifdef USE_C10D_NCCL
      const bool cuda_build = true;
#else
      const bool cuda_build = false;
#endif
      std::cout << (torch::cuda::is_available() ? torch::cuda::device_count() : 0) << " "
                << (cuda_build ? "cuda-build" : "cpu-build") << "\n";
      return 0;
    }
    if (mode == "train" && argc >= 6) {
      TrainVariant variant;
      for (int i = 6; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "nosync") variant.nosync = true;
        else if (word == "copy_grads") variant.copy_grads = true;
        else if (word == "set_to_none") variant.set_to_none = true;
        else if (word.rfind("replace=", 0) == 0) variant.replace = word.substr(8);
        else if (word == "cuda") variant.cuda_backend = "auto";
        else if (word == "cuda_gloo") variant.cuda_backend = "gloo";
        else die("unknown train variant: " + word);
      }
      return train(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), std::stoi(argv[5]), variant);
    }
    if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::stod(argv[4]));
    if (mode == "peer_dies" && argc == 3) return peer_fault(argv[2], true, {});
    if (mode == "peer_hangs" && argc == 3) return peer_fault(argv[2], false, {});
    if (mode == "peer_hangs" && argc == 5) return peer_fault(argv[2], false, group_options(argv[3], argv[4]));
    if (mode == "mismatch" && argc == 3) return mismatch(argv[2]);
    if (mode == "sampler" && argc == 2) return sampler();
    if (mode == "hang" && argc == 4) return hang(argv[2], std::stoi(argv[3]));
    if (mode == "hooks" && argc == 5) return hooks(argv[2], argv[3], std::stoi(argv[4]));
    if (mode == "store_ops" && argc == 3) return store_ops(argv[2]);
    if (mode == "last_words" && argc == 2) {
      return ddprun::run_main(argc, argv, [](int, char**) -> int {
        std::printf("last words from printf\n");
        std::cout << "last words from std::cout\n";  // "\n", not std::endl: no explicit flush
        ::raise(SIGKILL);
        return 0;
      });
    }
    if (mode == "extra_backward" && argc == 2) return ddprun::run_main(argc, argv, extra_backward);
    if (mode == "resume" && (argc == 5 || (argc == 6 && std::string(argv[5]) == "LOAD"))) {
      return resume(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), argc == 6);
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("usage: see the comment at the top of tests/worker/rank_driver.cpp");
}
