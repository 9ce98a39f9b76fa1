set(SHARDTOPK_CUDA_ENGINE_SOURCES cuda_engine.cu device_query.cu)
set(SHARDTOPK_CUDA_TESTS test_cuda_engine.cpp)
