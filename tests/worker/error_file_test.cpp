// run/error_file.cpp: the JSON of TORCHELASTIC_ERROR_FILE.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ddprun/error_file.hpp"

using namespace ddprun;

TEST_CASE("error file: PyTorch's @record format, read by ddprun and torchrun") {
  const auto doc = nlohmann::json::parse(error_file_json("std::runtime_error", "boom", "stack", 1700000000));
  CHECK(doc["message"]["message"] == "std::runtime_error: boom");
  CHECK(doc["message"]["extraInfo"]["py_callstack"] == "stack");
  CHECK(doc["message"]["extraInfo"]["timestamp"] == "1700000000");
}
