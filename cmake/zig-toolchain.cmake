# The toolchain of the pip wheels (scripts/build-wheel.sh; why zig: docs/development.md, "The wheels"): zig's
# clang, from PyPI's `ziglang`, compiling against its own copy of glibc 2.28's headers and
# stubs for the CPU it is given, and linking its libc++ in statically. The launcher built so
# needs nothing from the system but glibc >= 2.28 (and the loader); what it dlopen()s stays
# optional. Header-only libraries (fmt, nlohmann_json, Asio) and the header-only parts of curl
# and MUNGE come from the build machine's /usr/include, which zig searches after its own libc,
# so glibc's declarations are always 2.28's.
#
# Taken from the environment, so that CMake's try_compile projects see them too:
#   DDPRUN_ZIG         the zig executable (python -c 'import ziglang, os; print(os.path.dirname(ziglang.__file__))'/zig)
#   DDPRUN_ZIG_TARGET  x86_64-linux-gnu.2.28 or aarch64-linux-gnu.2.28
if(NOT DEFINED ENV{DDPRUN_ZIG} OR NOT DEFINED ENV{DDPRUN_ZIG_TARGET})
  message(FATAL_ERROR "zig-toolchain.cmake needs DDPRUN_ZIG (the zig program) and DDPRUN_ZIG_TARGET "
                      "(x86_64-linux-gnu.2.28 or aarch64-linux-gnu.2.28) in the environment")
endif()
set(zig "$ENV{DDPRUN_ZIG}")
set(zig_target "$ENV{DDPRUN_ZIG_TARGET}")
if(NOT zig_target MATCHES "^(x86_64|aarch64)-linux-gnu\\.2\\.[0-9]+$")
  message(FATAL_ERROR "DDPRUN_ZIG_TARGET=${zig_target}: expected x86_64-linux-gnu.2.28 or aarch64-linux-gnu.2.28")
endif()
string(REGEX REPLACE "-.*" "" zig_cpu "${zig_target}")

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${zig_cpu})
set(CMAKE_C_COMPILER "${zig}" cc -target ${zig_target})
set(CMAKE_CXX_COMPILER "${zig}" c++ -target ${zig_target})
# The header-only packages' CMake files (fmt's, nlohmann_json's, curl's) are where Debian put them
# for the build machine's CPU: their headers serve every target.
execute_process(COMMAND uname -m OUTPUT_VARIABLE build_cpu OUTPUT_STRIP_TRAILING_WHITESPACE)
set(CMAKE_LIBRARY_ARCHITECTURE ${build_cpu}-linux-gnu)
# CMake's own archiver would be the build machine's binutils, which knows no aarch64 objects;
# LLVM's (Debian's llvm, which clang brings) knows every target.
find_program(DDPRUN_LLVM_AR NAMES llvm-ar llvm-ar-14 REQUIRED)
find_program(DDPRUN_LLVM_RANLIB NAMES llvm-ranlib llvm-ranlib-14 REQUIRED)
set(CMAKE_AR "${DDPRUN_LLVM_AR}" CACHE FILEPATH "" FORCE)
set(CMAKE_RANLIB "${DDPRUN_LLVM_RANLIB}" CACHE FILEPATH "" FORCE)
# zig links its libc++ and libunwind statically by itself; -static-libstdc++ means nothing here.
set(DDPRUN_STATIC_LIBSTDCXX OFF CACHE BOOL "" FORCE)
# An aarch64 program cannot run here during the build (CMake would try it for nothing).
set(CMAKE_CROSSCOMPILING_EMULATOR "")
