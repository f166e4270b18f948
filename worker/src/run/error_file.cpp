#include "ddprun/error_file.hpp"
#include "ddprun/launch_env.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <typeinfo>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "ddprun/clocks.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun {

namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string error_file_json(const std::string& type, const std::string& message,
                            const std::string& callstack, std::int64_t unix_seconds) {
  const nlohmann::json doc = {
      {"message",
       {{"message", type + ": " + message},
        {"extraInfo", {{"py_callstack", callstack}, {"timestamp", std::to_string(unix_seconds)}}}}}};
  // Replace invalid UTF-8 rather than throw: an exception message may hold any bytes.
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ExceptionReport describe_exception(const std::exception_ptr& error) {
  ExceptionReport report;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    report.type = demangle(typeid(e).name());
    report.message = e.what_without_backtrace();
    report.callstack = e.what();
  } catch (const std::exception& e) {
    report.type = demangle(typeid(e).name());
    report.message = e.what();
    report.callstack = "C++ exception " + report.type + " (no traceback)";
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    report.type = type != nullptr ? demangle(type->name()) : "unknown";
    report.message = "exception not derived from std::exception";
    report.callstack = "C++ exception " + report.type + " (no traceback)";
  }
  return report;
}

bool write_error_file(const std::exception_ptr& error) {
  const char* path = std::getenv(env::kErrorFile);
  if (path == nullptr || *path == '\0') return false;
  const ExceptionReport report = describe_exception(error);
  const auto now = static_cast<std::int64_t>(wall_seconds());
  const std::string json = error_file_json(report.type, report.message, report.callstack, now);

  const std::string tmp = std::string(path) + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = write_all(fd, json) && ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& main_fn) {
  line_buffer_stdout();
  try {
    return main_fn(argc, argv);
  } catch (...) {
    const auto error = std::current_exception();
    const ExceptionReport report = describe_exception(error);
    std::cerr << report.type << ": " << report.message << std::endl;
    if (!write_error_file(error) && std::getenv(env::kErrorFile) != nullptr) {
      std::cerr << "(could not write " << env::kErrorFile << "=" << std::getenv(env::kErrorFile)
                << ")" << std::endl;
    }
    return kUncaughtExceptionExitCode;
  }
}

}  // namespace ddprun
