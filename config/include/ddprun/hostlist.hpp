// SLURM's compressed host lists ("n[01-04,07],gpu[1-2]-ib[0-1]"), expanded without calling
// scontrol: a missing scontrol must not silently turn a multi-node job into one-node worlds.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::slurm {

// A host list that is not valid; what() quotes the list and says what is wrong where.
class HostlistError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// SLURM rejects a single range of more hosts than this ("Too many hosts in range").
inline constexpr std::size_t kMaxHostsPerRange = 64 * 1024;
// A bound on the whole expansion, so a hostile list cannot exhaust memory.
inline constexpr std::size_t kMaxHosts = 1024 * 1024;
// Host names are at most this long (DNS: 253), and all of them together at most this many
// characters: a long name times a large range must not take gigabytes.
inline constexpr std::size_t kMaxHostNameChars = 255;
inline constexpr std::size_t kMaxHostlistChars = 32 * 1024 * 1024;

// Expands `hostlist` into host names in the order `scontrol show hostnames` prints them,
// duplicates kept.
//
// Items are separated by commas or whitespace outside brackets; empty items are skipped.
// An item is text with any number of bracket groups; each group is a comma-separated list of
// `N` or `N-M` (decimal, N <= M), and every number is printed at least as wide as the `N` it
// came from, so zero padding is kept: node[01-04,07] -> node01 node02 node03 node04 node07,
// n[8-10] -> n8 n9 n10. Several groups multiply out: rack[1-2]-n[1-2] -> rack1-n1 rack1-n2
// rack2-n1 rack2-n2 (with three or more groups, in scontrol's less obvious order).
//
// Throws HostlistError when the list names no host, a bracket is unbalanced or nested, a range
// is empty, not decimal or decreasing, or a range, a host name or the whole list is larger than the limits
// above.
std::vector<std::string> expand_hostlist(std::string_view hostlist);

}  // namespace ddprun::slurm
