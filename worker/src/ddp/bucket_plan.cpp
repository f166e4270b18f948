#include "ddprun/bucket_plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace ddprun {

std::size_t megabytes_to_bytes(double mb) {
  if (!(mb >= 0) || !std::isfinite(mb)) throw std::invalid_argument("bucket cap must be >= 0 MB");
  return static_cast<std::size_t>(std::llround(mb * 1024.0 * 1024.0));
}

std::vector<Bucket> plan_buckets(const std::vector<ParamSlot>& params, std::size_t first_cap_bytes,
                                 std::size_t cap_bytes) {
  struct Open {
    Bucket bucket;
    bool first = true;
  };
  std::map<int, Open> open;
  std::vector<Bucket> closed;

  for (std::size_t k = params.size(); k-- > 0;) {
    Open& o = open[params[k].group];
    o.bucket.params.push_back(k);
    o.bucket.bytes += params[k].bytes;
    if (o.bucket.bytes >= (o.first ? first_cap_bytes : cap_bytes)) {
      closed.push_back(std::move(o.bucket));
      o.bucket = Bucket{};
      o.first = false;
    }
  }
  for (auto& [group, o] : open) {
    if (!o.bucket.params.empty()) closed.push_back(std::move(o.bucket));
  }
  // Params were visited from the last index down, so a bucket's first parameter has the
  // highest index of its bucket: order buckets by it, descending.
  std::stable_sort(closed.begin(), closed.end(), [](const Bucket& a, const Bucket& b) {
    return a.params.front() > b.params.front();
  });
  return closed;
}

}  // namespace ddprun
