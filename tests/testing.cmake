# Helpers shared by the test folders.

# A test that needs something absent (a GPU, SLURM, root for network namespaces) exits with
# this code and CTest reports it as skipped, with the reason the test printed.
set(DDPRUN_SKIP_CODE 77)

# ddprun_unit_test(NAME SOURCES... LIBS libs...): a doctest executable, one CTest entry.
function(ddprun_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp ${T_SOURCES})
  target_link_libraries(${name} PRIVATE doctest::doctest ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 LABELS unit)
endfunction()

# ddprun_script_test(NAME SCRIPT [LABELS ...] [TIMEOUT s] [ARGS ...]): an integration test
# written in bash, given ARGS.
# The script gets DDPRUN, TRAIN and the build/source dirs in its environment and sources
# tests/lib.sh for its helpers.
function(ddprun_script_test name script)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${script} ${T_ARGS})
  set(env
    DDPRUN=$<TARGET_FILE:ddprun>
    DDPRUN_BUILD_DIR=${PROJECT_BINARY_DIR}
    DDPRUN_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    DDPRUN_TESTS_DIR=${PROJECT_SOURCE_DIR}/tests
    DDPRUN_SKIP_CODE=${DDPRUN_SKIP_CODE})
  if(TARGET train)
    list(APPEND env TRAIN=$<TARGET_FILE:train> TORCH_PYTHON=${DDPRUN_TORCH_PYTHON})
  endif()
  # COST: CTest -j starts the costliest tests first. A fresh clone (CI's) has no measured costs
  # (Testing/Temporary/CTestCostData.txt), so without one the order would be the declared one,
  # and a test of minutes declared late would run alone at the end while the other slots idle.
  # The timeout stands for the length (the long tests are those given long timeouts); once a
  # build folder has run its tests, CTest's own measured costs replace it.
  set_tests_properties(${name} PROPERTIES
    TIMEOUT ${T_TIMEOUT}
    COST ${T_TIMEOUT}
    ENVIRONMENT "${env}"
    SKIP_RETURN_CODE ${DDPRUN_SKIP_CODE}
    LABELS "integration;${T_LABELS}")
endfunction()
