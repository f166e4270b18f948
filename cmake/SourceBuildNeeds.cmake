# Included by CMakeLists.txt when pip builds ddprun from its sdist (scikit-build-core sets
# SKBUILD): that happens only where no wheel fits (docs/install.md), and what the build lacks is
# then said in one line, with the packages that bring it, instead of CMake's page per package.
# Before project(): the compiler; after it (ddprun_source_build_needs()): the libraries' headers.
# (A message that starts with a space is printed as it is, not wrapped: one line.)
if(POLICY CMP0109)
  cmake_policy(SET CMP0109 NEW)  # a program is one that can be run
endif()
if(NOT CMAKE_CXX_COMPILER AND NOT DEFINED ENV{CXX} AND NOT CMAKE_TOOLCHAIN_FILE AND NOT DEFINED ENV{CMAKE_TOOLCHAIN_FILE})
  find_program(ddprun_cxx NAMES c++ g++ clang++)
  if(NOT ddprun_cxx)
    message(FATAL_ERROR " ddprun: building from source needs a C++17 compiler (none of c++, g++, clang++ found; "
                        "Debian: build-essential); pip normally installs the manylinux_2_28 wheel instead, see docs/install.md")
  endif()
endif()

function(ddprun_source_build_needs)
  set(missing)
  find_path(ddprun_fmt fmt/format.h)
  if(NOT ddprun_fmt)
    list(APPEND missing "fmt (libfmt-dev)")
  endif()
  find_path(ddprun_json nlohmann/json.hpp)
  if(NOT ddprun_json)
    list(APPEND missing "nlohmann_json (nlohmann-json3-dev)")
  endif()
  find_path(ddprun_asio asio.hpp)
  if(NOT ddprun_asio)
    list(APPEND missing "Asio (libasio-dev)")
  endif()
  if(NOT DEFINED DDPRUN_ETCD OR DDPRUN_ETCD)
    find_path(ddprun_curl curl/curl.h PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE})
    if(NOT ddprun_curl)
      list(APPEND missing "curl (libcurl4-openssl-dev)")
    endif()
  endif()
  if(missing)
    list(JOIN missing ", " missing)
    message(FATAL_ERROR " ddprun: building from source needs the headers of ${missing} (Debian package names); "
                        "pip normally installs the manylinux_2_28 wheel instead, see docs/install.md")
  endif()
endfunction()
