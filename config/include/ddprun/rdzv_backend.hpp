// torchrun's --rdzv_backend names, parsed in one place: the launch configuration validates the
// name with it, and the launcher maps it to the rendezvous it makes. Header-only, so that
// elastic/ can use it without the launch-configuration library.
#pragma once

#include <optional>
#include <string_view>

namespace ddprun::config {

// static and c10d are served by ddprun's own TCP rendezvous; etcd keeps the job in an etcd
// cluster (etcd's v3 API).
enum class RdzvBackend { kStatic, kC10d, kEtcd };

// The backend `name` names, or nullopt for any other name (torchrun's etcd-v2 included).
inline std::optional<RdzvBackend> parse_rdzv_backend(std::string_view name) {
  if (name == "static") return RdzvBackend::kStatic;
  if (name == "c10d") return RdzvBackend::kC10d;
  if (name == "etcd") return RdzvBackend::kEtcd;
  return std::nullopt;
}

}  // namespace ddprun::config
