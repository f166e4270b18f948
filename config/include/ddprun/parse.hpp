// The values users give ddprun, read one way whichever source gives them: the command line,
// PET_* variables, a --config file, --rdzv_conf's KEY=VALUE pairs and the launcher's own
// variables (DDPRUN_*). Each kind of value has one grammar, in one place, with a table test.
//
// `name` is the value's name as the user wrote it, for the message: "--max_restarts",
// "--rdzv_conf join_timeout", "DDPRUN_QUIET_WARNING_SECONDS". Every refusal is a UsageError of
// one line, "NAME=VALUE: expected ...", the value quoted short by shown().
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "ddprun/user_error.hpp"

namespace ddprun::config {

// "NAME=VALUE: expected ACCEPTED": how every bad value of an option is refused.
UsageError bad_value(std::string_view name, std::string_view text, std::string_view accepted);

// A whole number in decimal, as strtoll reads one: blanks before it and a sign are allowed,
// nothing after it. nullopt for anything else, and for numbers beyond long long.
std::optional<long long> to_integer(std::string_view text);

// to_integer() within [min, max]; else throws bad_value(name, text, accepted).
int parse_integer(std::string_view name, std::string_view text, int min, int max, std::string_view accepted);

// A number of seconds, as strtod reads one (1, 0.5, 1e3), at least 0 and at most
// kMaxTimeoutSeconds: inf, nan and 1e308 are nullopt, never a timer that overflows and fires at
// once.
std::optional<double> to_seconds(std::string_view text);

enum class Zero { kRefused, kAllowed };
// to_seconds(), 0 accepted only with Zero::kAllowed; else throws bad_value(), stating the range.
double parse_seconds(std::string_view name, std::string_view text, Zero zero);

// The one meaning of true and false, for every flag and boolean key. Case aside: 1, true, t,
// yes, y, on and 0, false, f, no, n, off. torchrun's --rdzv_conf booleans take 1/true/t/yes/y
// and 0/false/f/no/n (RendezvousParameters.get_as_bool); its PET_* flags take 1 and 0; on and off
// are ddprun's own (--progress, and its flags have always taken them). Empty text is nullopt:
// where an empty value means "not set" is the caller's to say.
std::optional<bool> to_bool(std::string_view text);

// to_bool(), or throws bad_value(name, text, ...) listing what is accepted.
bool parse_bool(std::string_view name, std::string_view text);

// A size in bytes: a whole number followed by K, M, G or T (powers of 1024, as tmpfs's size=
// and `df -h` mean them; KiB, MiB, GiB, TiB too, any case), or bytes without a unit. "4G",
// "512M", "1.5G" is not one (no fractions: 1536M). nullopt for anything else and past 2^62 bytes.
std::optional<unsigned long long> to_size(std::string_view text);

// to_size(), at least `min` bytes; else throws bad_value(name, text, ...) with examples.
unsigned long long parse_size(std::string_view name, std::string_view text, unsigned long long min);

// The index of `text` among `words`; else throws bad_value(name, text, "a, b or c"). An empty
// word among them accepts "" (the option unset) and is not listed.
std::size_t parse_choice(std::string_view name, std::string_view text, std::initializer_list<std::string_view> words);

}  // namespace ddprun::config
