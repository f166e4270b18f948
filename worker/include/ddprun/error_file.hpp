// Reporting a worker's fatal error to its launcher. ddprun and torchrun give every worker a
// TORCHELASTIC_ERROR_FILE; a worker that dies of an exception writes it there, in the JSON
// that PyTorch's @record decorator writes, and the launcher shows that message as the root
// cause of the job's failure instead of a bare exit code.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "ddprun/export.hpp"

namespace ddprun {

// The exit status of a worker whose main ended with an exception (Python's, too).
inline constexpr int kUncaughtExceptionExitCode = 1;

// PyTorch's error file contents:
// {"message": {"message": "<type>: <message>",
//              "extraInfo": {"py_callstack": "<callstack>", "timestamp": "<seconds>"}}}
DDPRUN_API std::string error_file_json(const std::string& type, const std::string& message,
                            const std::string& callstack, std::int64_t unix_seconds);

// The exception's dynamic type as C++ spells it (e.g. "std::runtime_error",
// "ddprun::CommError"), its message, and the C++ backtrace when it carries one (c10::Error).
struct ExceptionReport {
  std::string type;
  std::string message;
  std::string callstack;
};
DDPRUN_API ExceptionReport describe_exception(const std::exception_ptr& error);

// Writes `error` to the file TORCHELASTIC_ERROR_FILE names, if set, atomically (temporary file,
// then rename). Returns false, without throwing, if it cannot be written.
DDPRUN_API bool write_error_file(const std::exception_ptr& error);

// Runs `main_fn(argc, argv)` and returns its result. An exception escaping it is printed to
// stderr, recorded in TORCHELASTIC_ERROR_FILE, and turned into kUncaughtExceptionExitCode.
// Makes stdout line-buffered first (line_buffer_stdout(), launch_env.hpp).
//
//   int main(int argc, char** argv) { return ddprun::run_main(argc, argv, real_main); }
DDPRUN_API int run_main(int argc, char** argv, const std::function<int(int, char**)>& main_fn);

}  // namespace ddprun
