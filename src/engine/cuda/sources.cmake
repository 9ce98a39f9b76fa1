# The CUDA engine: its sources and the options its CUDA code is compiled with (its tests are
# registered in tests/CMakeLists.txt).
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
  ${_stk_cuda_dir}/kernels/store_f16_bits.cu
  ${_stk_cuda_dir}/kernels/load_norms.cu
  ${_stk_cuda_dir}/kernels/scan_select.cu
  ${_stk_cuda_dir}/kernels/scan_few.cu
  ${_stk_cuda_dir}/kernels/candidate_pools.cu
  ${_stk_cuda_dir}/kernels/gathered_scores.cu
  ${_stk_cuda_dir}/kernels/rescore.cu
  ${_stk_cuda_dir}/kernels/filter_table.cu
  ${_stk_cuda_dir}/kernels/filter_blocks.cu
  ${_stk_cuda_dir}/kernels/filtered_scan.cu
  ${_stk_cuda_dir}/kernels/id_rows.cu
  ${_stk_cuda_dir}/kernels/column_order.cu
  ${_stk_cuda_dir}/kernels/window_select.cu
  ${_stk_cuda_dir}/filtered_search.cu)
set(SHARDTOPK_CUDA_ENGINE_LIBRARIES CUDA::cudart CUDA::cublas)
# Built apart, for sm_90a (src/CMakeLists.txt): its instructions exist on compute capability 9.0 only.
set(SHARDTOPK_CUDA_FUSED_SOURCE ${_stk_cuda_dir}/kernels/fused_collect.cu)

# Compile options of the engine's CUDA code (the kernels' machine code depends on them: keep
# them identical wherever these sources are built). Whole-program compilation (no
# CUDA_SEPARABLE_COMPILATION): each kernel and its launcher are in one file.
set(SHARDTOPK_CUDA_ENGINE_CUDA_OPTIONS --expt-relaxed-constexpr --extended-lambda -lineinfo)
