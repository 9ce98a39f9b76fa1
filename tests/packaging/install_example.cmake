# What a user of the installed package does (CTest: test_install_example, cmake -P):
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix
#   2. configure and build examples/cpp against it (find_package(shardtopk))
#   3. run the example on one rank and under MPIEXEC on two (CPU engine); each checks its answer
#   4. import the installed Python module (when PYTHON is given) and search with it
# Variables: SOURCE_DIR BUILD_DIR WORK_DIR GENERATOR [MPIEXEC MPIEXEC_FLAGS] [PYTHON PYTHON_DIR]
# [CXX_LAUNCHER] (PYTHON_DIR: the module's folder relative to the prefix).
cmake_minimum_required(VERSION 3.24)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

set(launcher "")
if(CXX_LAUNCHER)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
endif()
# The example is compiled and linked with the flags the libraries were built with (a sanitizer
# build's libraries need its runtime).
run("configure examples/cpp" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/cpp" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}" ${launcher} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
run("build examples/cpp" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")

set(example "${WORK_DIR}/build/search_example")
run("search_example cpu (one rank)" "${example}" cpu)
if(NOT last_output MATCHES "ok: 0 wrong id")
  message(FATAL_ERROR "search_example did not report a correct answer")
endif()
if(MPIEXEC)
  separate_arguments(flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
  run("search_example cpu (two ranks)" "${MPIEXEC}" -n 2 ${flags} "${example}" cpu)
  if(NOT last_output MATCHES "2 rank\\(s\\)" OR NOT last_output MATCHES "ok: 0 wrong id")
    message(FATAL_ERROR "search_example on two ranks did not report a correct answer")
  endif()
endif()

if(PYTHON)
  # (one statement a line: a ';' would split the CMake argument)
  set(script [=[
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, shardtopk
v = np.arange(60, dtype=np.float32).reshape(20, 3) % 7
ix = shardtopk.Index.from_arrays(v, backend='cpu')
ids, s = ix.search(v[4], 3)
ix.close()
print('installed module', shardtopk.__file__, ids.tolist(), s.tolist())
]=])
  run("import the installed module" "${PYTHON}" -c "${script}" "${prefix}/${PYTHON_DIR}")
  if(NOT last_output MATCHES "installed module ${prefix}/${PYTHON_DIR}/shardtopk")
    message(FATAL_ERROR "the module imported is not the installed one")
  endif()
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
