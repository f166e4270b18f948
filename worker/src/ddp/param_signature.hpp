// Checking that every rank built the same model before DistributedDataParallel starts
// averaging gradients: a shape mismatch would otherwise surface as a gloo size error, or
// not at all.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun {

// One entry per parameter, in registration order, e.g. "fc1.weight: Float [64, 32]".
using ParamSignature = std::vector<std::string>;

// Compares rank `other_rank`'s signature with rank 0's. Returns a sentence naming the first
// parameter that differs (or the first one only one side has), or nothing when they agree.
std::optional<std::string> first_param_mismatch(const ParamSignature& rank0,
                                                const ParamSignature& other, int other_rank);

// One signature as a single string (for all_gather_bytes), and back.
std::string encode_signature(const ParamSignature& signature);
ParamSignature decode_signature(const std::string& bytes);

}  // namespace ddprun
