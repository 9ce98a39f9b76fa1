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

enum class EngineBackend { kAuto, kCpu, kCuda };
enum class CommBackend { kAuto, kMpi, kNccl };

std::string to_string(Metric m);
std::string to_string(Dtype d);
std::string to_string(EngineBackend b);
std::string to_string(CommBackend b);

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

/// Bytes per element of a storage dtype.
std::size_t dtype_bytes(Dtype d);

/// Convert a ranking score (higher is better) to the reported value: the similarity for
/// inner_product and cosine, the squared distance for l2.
inline float reported_score(Metric m, float ranking_score) {
  return m == Metric::kL2 ? -ranking_score : ranking_score;
}

/// The program version, as written into result files.
const char* version();

}  // namespace shardtopk
