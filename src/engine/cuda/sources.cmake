# The CUDA engine: its sources, the options its CUDA code is compiled with, and its tests.
# Included by the top-level CMakeLists.txt when CUDA is enabled (CUDAToolkit found).

set(_stk_cuda_dir ${CMAKE_CURRENT_LIST_DIR})

# CUDA engine + CUDA memory space + device queries. Needs include/ and src/ on the include
# path, and CUDA::cudart, CUDA::cublas (SHARDTOPK_CUDA_ENGINE_LIBRARIES).
set(SHARDTOPK_CUDA_ENGINE_SOURCES
  ${_stk_cuda_dir}/cuda_engine.cu
  ${_stk_cuda_dir}/batched_search.cu
  ${_stk_cuda_dir}/graph_cache.cu
  ${_stk_cuda_dir}/plan.cpp
  ${_stk_cuda_dir}/cuda_space.cu
  ${_stk_cuda_dir}/device_query.cu
  ${_stk_cuda_dir}/kernels/fill.cu
  ${_stk_cuda_dir}/kernels/split.cu
  ${_stk_cuda_dir}/kernels/merge.cu
  ${_stk_cuda_dir}/kernels/query_prep.cu
  ${_stk_cuda_dir}/kernels/shard_store.cu
  ${_stk_cuda_dir}/kernels/scan_select.cu
  ${_stk_cuda_dir}/kernels/batched_filter.cu
  ${_stk_cuda_dir}/kernels/rescore.cu
  ${_stk_cuda_dir}/kernels/filter_mask.cu)
set(SHARDTOPK_CUDA_ENGINE_LIBRARIES CUDA::cudart CUDA::cublas)

# Compile options of the engine's CUDA code (the kernels' machine code depends on them: keep
# them identical wherever these sources are built). Whole-program compilation (no
# CUDA_SEPARABLE_COMPILATION): each kernel and its launcher are in one file.
set(SHARDTOPK_CUDA_ENGINE_CUDA_OPTIONS --expt-relaxed-constexpr --extended-lambda -lineinfo)

# shardtopk_add_cuda_engine_tests(LINK <libraries...>): the engine's GoogleTest binaries
# (tests/engine/cuda/<name>.cpp), one executable and CTest entry each, linked with LINK (the
# library holding SHARDTOPK_CUDA_ENGINE_SOURCES, the float64 oracle, and for test_cuda_engine the
# CPU engine), GoogleTest and the CUDA runtime; label gpu. Each runs on GPU 0 (or the MPI local
# rank's GPU) and skips every case, saying "no GPU visible", without one.
function(shardtopk_add_cuda_engine_tests)
  cmake_parse_arguments(ARG "" "" "LINK" ${ARGN})
  get_filename_component(root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../../.. ABSOLUTE)
  set(dir ${root}/tests/engine/cuda)
  set(tests
    test_cuda_engine   # the engine through the public interface (needs the CPU engine too)
    test_cuda_space    # the CUDA memory space
    test_scan_select   # kernels/scan_select
    test_batched       # kernels/query_prep (batched part), batched_filter, rescore, via batched_search
    test_query_prep    # kernels/query_prep (validation, normalisation)
    test_shard_store   # kernels/shard_store
    test_merge         # kernels/merge
    test_split         # kernels/split and kernels/fill
    test_filter_mask   # kernels/filter_mask against the host evaluation
  )
  foreach(t IN LISTS tests)
    add_executable(${t} ${dir}/${t}.cpp)
    target_link_libraries(${t} PRIVATE ${ARG_LINK} GTest::gtest GTest::gtest_main CUDA::cudart CUDA::cublas)
    target_include_directories(${t} PRIVATE ${root}/include ${root}/src ${root}/testing ${dir})
    target_compile_definitions(${t} PRIVATE SHARDTOPK_SOURCE_DIR="${root}")
    # SHARDTOPK_GPU_TEST_LAUNCHER: e.g. mpiexec -n 1, so the binary runs as the GPU suites do.
    add_test(NAME ${t} COMMAND ${SHARDTOPK_GPU_TEST_LAUNCHER} $<TARGET_FILE:${t}>)
    set_tests_properties(${t} PROPERTIES TIMEOUT 300 LABELS gpu SKIP_REGULAR_EXPRESSION "no GPU visible")
  endforeach()
  set_tests_properties(test_cuda_engine PROPERTIES TIMEOUT 600)
endfunction()
