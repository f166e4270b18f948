#include "param_signature.hpp"

#include <sstream>

namespace ddprun {

std::optional<std::string> first_param_mismatch(const ParamSignature& rank0,
                                                const ParamSignature& other, int other_rank) {
  const std::string theirs = "rank " + std::to_string(other_rank);
  for (std::size_t i = 0; i < rank0.size() || i < other.size(); ++i) {
    const std::string where = "parameter " + std::to_string(i) + ": ";
    if (i >= other.size()) {
      return where + "rank 0 has '" + rank0[i] + "' but " + theirs + " has only " +
             std::to_string(other.size()) + " parameters";
    }
    if (i >= rank0.size()) {
      return where + theirs + " has '" + other[i] + "' but rank 0 has only " +
             std::to_string(rank0.size()) + " parameters";
    }
    if (rank0[i] != other[i]) {
      return where + "rank 0 has '" + rank0[i] + "' but " + theirs + " has '" + other[i] + "'";
    }
  }
  return std::nullopt;
}

std::string encode_signature(const ParamSignature& signature) {
  std::string out;
  for (const auto& line : signature) out += line + '\n';
  return out;
}

ParamSignature decode_signature(const std::string& bytes) {
  ParamSignature out;
  std::istringstream in(bytes);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace ddprun
