#pragma once
/// @file types.hpp
/// Enumerations shared by every module: metric, storage dtype, backends.

#include <cstdint>
#include <string>

namespace shardtopk {

/// Similarity / distance. Scores are ranked "higher is better" internally; l2 is ranked as the
/// negated squared Euclidean distance and reported as the (positive) squared distance.
enum class Metric { kInnerProduct, kCosine, kL2 };

/// How the resident shard is stored. Scoring always accumulates in float32.
enum class Dtype { kFloat32, kFloat16, kBFloat16 };

/// How a block of rows travels from the corpus reader to an engine: float32 values (4 bytes
/// each), or IEEE binary16 bit patterns (2 bytes each: a float16 dataset goes from the file to
/// the engine unconverted). Every binary16 value is exactly a float32 value, so both formats
/// of a float16 dataset hold the same values.
enum class RowFormat { kFloat32, kFloat16Bits };

enum class EngineBackend { kAuto, kCpu, kCuda };
enum class CommBackend { kAuto, kMpi, kNccl };

/// The type of a per-row attribute column (filters, upserts): int64 or float64 values.
enum class AttributeType : std::uint8_t { kInt64 = 0, kFloat64 = 1 };

/// Where a buffer lives: host memory, or the memory of the engine's GPU.
enum class MemSpace { kHost, kDevice };

/// CUDA batch-1 scan: rows per warp. kAuto: from the row length (2, 4 or 8 rows); kTwo: 2 rows
/// of up to 4 chunks per lane at every D (engine.scan_rows: auto | 2).
enum class ScanRows { kAuto, kTwo };
/// CUDA batch-1 scan: a persistent grid, or blocks of 1,024 rows scheduled by the hardware;
/// kAuto: blocks from 8 waves of such blocks on (engine.scan_schedule: auto | blocked | persistent).
enum class ScanSchedule { kAuto, kBlocked, kPersistent };
/// Which CUDA path serves a batch: kAuto = the scan for batch 1, one scan for the whole batch
/// for batches of 2 to 8 where it measured faster (the few-query scan), the tensor-core GEMM path
/// otherwise; kScan / kGemm force one; kFew takes the few-query scan for every batch of 2 to 8
/// that it fits (tests, measurements; engine.search_path: auto | scan | gemm | few | cublas; cublas:
/// the tensor-core path with cuBLAS GEMMs and a separate collect, never the fused kernel).
enum class SearchPath { kAuto, kScan, kGemm, kFew, kCublas };
/// CUDA filtered batch-1 scan: kAuto = the gathered scan (only the passing rows, listed first)
/// when under a fixed fraction of its candidate blocks' rows pass, else the dense scan of those
/// blocks; kDense / kGathered force one (measurements, tests; engine.filter_scan: auto | dense |
/// gathered). The answer's bits are the same either way.
enum class FilterScan { kAuto, kDense, kGathered };
/// CPU engine scoring instructions: kAuto = the best the processor has (AVX-512, else AVX2/FMA,
/// else portable C++ with the same arithmetic order) (engine.cpu_isa: auto | avx512 | avx2 | portable).
enum class CpuIsa { kAuto, kAvx512, kAvx2, kPortable };

std::string to_string(Metric m);
std::string to_string(Dtype d);
std::string to_string(EngineBackend b);
std::string to_string(CommBackend b);
std::string to_string(MemSpace s);
std::string to_string(AttributeType t);
std::string to_string(ScanRows r);
std::string to_string(ScanSchedule s);
std::string to_string(SearchPath p);
std::string to_string(FilterScan f);
std::string to_string(CpuIsa i);

/// Parse a metric name: "inner_product", "cosine", "l2". The ann-benchmarks distance names
/// "euclidean" (l2), "angular" (cosine), "dot" and "ip" (inner_product) are accepted too: they
/// are what files carry in their `distance` attribute. Where a user writes the name (config,
/// flags) they are deprecated: pass `deprecation` and it receives a message naming `what`, the
/// alias and its replacement ("" for a canonical name); the caller shows it.
/// @throws Error naming `what`, the value and the allowed names.
Metric parse_metric(const std::string& s, const std::string& what = "metric", std::string* deprecation = nullptr);
/// Parse "float32", "float16", "bfloat16". @throws Error.
Dtype parse_dtype(const std::string& s, const std::string& what = "dtype");
/// Parse "auto", "cpu", "cuda". @throws Error.
EngineBackend parse_engine_backend(const std::string& s, const std::string& what = "engine.backend");
/// Parse "auto", "mpi", "nccl". @throws Error.
CommBackend parse_comm_backend(const std::string& s, const std::string& what = "comm.backend");

/// Parse the option enums' names (as listed above). @throws Error naming `what`, the value and
/// the allowed names.
ScanRows parse_scan_rows(const std::string& s, const std::string& what = "engine.scan_rows");
ScanSchedule parse_scan_schedule(const std::string& s, const std::string& what = "engine.scan_schedule");
SearchPath parse_search_path(const std::string& s, const std::string& what = "engine.search_path");
FilterScan parse_filter_scan(const std::string& s, const std::string& what = "engine.filter_scan");
CpuIsa parse_cpu_isa(const std::string& s, const std::string& what = "engine.cpu_isa");

/// Bytes per element of a storage dtype.
std::size_t dtype_bytes(Dtype d);
/// Bytes of one value of a row format: 4 (float32) or 2 (binary16 bits).
std::size_t format_bytes(RowFormat f);

/// Convert a ranking score (higher is better) to the reported value: the similarity for
/// inner_product and cosine, the squared distance for l2.
inline float reported_score(Metric m, float ranking_score) {
  return m == Metric::kL2 ? -ranking_score : ranking_score;
}

/// The program version, as written into result files.
const char* version();

}  // namespace shardtopk
