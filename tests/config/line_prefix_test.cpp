// The console prefix: --log_line_prefix's template as torchrun's
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is read (string.Template.safe_substitute), and where the
// template comes from.
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/line_prefix.hpp"
#include "resolve_testing.hpp"

using namespace ddprun::config;

TEST_CASE("line_prefix substitutes as Python's Template.safe_substitute, role default, rank 3, local rank 1") {
  const struct {
    const char* tmpl;
    const char* expected;
  } rows[] = {
      {"[rank${rank}]: ", "[rank3]: "},
      {"[${role_name}-${local_rank}] ", "[default-1] "},
      {"[$role_name$local_rank]:", "[default1]:"},
      {"$rank/$local_rank", "3/1"},
      {"", ""},
      {"no placeholder ", "no placeholder "},
      {"$$rank", "$rank"},             // "$$" is one '$'
      {"$$$rank", "$3"},
      {"${nope} ", "${nope} "},        // unknown: left as written (safe)
      {"$nope ", "$nope "},
      {"$ranks ", "$ranks "},          // the longest name, then unknown
      {"$rank_ ", "$rank_ "},
      {"${rank ", "${rank "},          // no '}': as written
      {"${} $ 1$", "${} $ 1$"},
      {"$1rank", "$1rank"},            // not a name
      {"${RANK}", "${RANK}"},          // names are case-sensitive
      {"[${rank}]x${rank}", "[3]x3"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.tmpl);
    CHECK(line_prefix(row.tmpl, "default", 3, 1) == row.expected);
  }
}

TEST_CASE("--log_line_prefix: the option, PET_LOG_LINE_PREFIX, --config, then TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") {
  const auto with_env = [](const RawOptions& cli, std::map<std::string, std::string> environ) {
    ResolveContext context;
    context.cpu_count = 6;
    context.gpu_count = 0;
    context.environ = std::move(environ);
    return resolve_config({{}, {}, {}, cli}, {"train"}, context).log_line_prefix;
  };
  CHECK(resolve({}).log_line_prefix == "[rank${rank}]: ");
  CHECK(resolve({{"log_line_prefix", ""}}).log_line_prefix.empty());
  CHECK(resolve({}, {{"log_line_prefix", "${rank}| "}}).log_line_prefix == "${rank}| ");
  CHECK(resolve({}, {}, {{"log_line_prefix", "<$local_rank>"}}).log_line_prefix == "<$local_rank>");
  const char* kVar = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
  CHECK(with_env({}, {{kVar, "[${role_name}${local_rank}]:"}}) == "[${role_name}${local_rank}]:");
  CHECK(with_env({}, {{kVar, ""}}) == "[rank${rank}]: ");  // empty: torchrun's default, ddprun's
  CHECK(with_env({{"log_line_prefix", ""}}, {{kVar, "[x]"}}).empty());  // the option wins
  CHECK(to_json(resolve({{"log_line_prefix", "r$rank "}}))["log_line_prefix"] == "r$rank ");
  CHECK(usage_error({{"log_line_prefix", "a\nb"}}) ==
        "--log_line_prefix=a?b: a control character; expected a template of at most 256 characters, on one line, "
        "with ${rank}, ${local_rank} and ${role_name} (empty: no prefix)");
  CHECK(usage_error({{"log_line_prefix", std::string(300, 'p')}}).find("too long") != std::string::npos);
  try {
    with_env({}, {{kVar, "a\tb"}});
    FAIL("accepted");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).rfind("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=a?b: a control character", 0) == 0);
  }
}
