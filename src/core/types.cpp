#include "shardtopk/types.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk {

std::string to_string(Metric m) {
  switch (m) {
    case Metric::kInnerProduct: return "inner_product";
    case Metric::kCosine: return "cosine";
    case Metric::kL2: return "l2";
  }
  return "?";
}
std::string to_string(Dtype d) {
  switch (d) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat16: return "float16";
    case Dtype::kBFloat16: return "bfloat16";
  }
  return "?";
}
std::string to_string(EngineBackend b) {
  switch (b) {
    case EngineBackend::kAuto: return "auto";
    case EngineBackend::kCpu: return "cpu";
    case EngineBackend::kCuda: return "cuda";
  }
  return "?";
}
std::string to_string(CommBackend b) {
  switch (b) {
    case CommBackend::kAuto: return "auto";
    case CommBackend::kMpi: return "mpi";
    case CommBackend::kNccl: return "nccl";
  }
  return "?";
}

Metric parse_metric(const std::string& s, const std::string& what, std::string* deprecation) {
  if (deprecation) deprecation->clear();
  if (s == "inner_product") return Metric::kInnerProduct;
  if (s == "cosine") return Metric::kCosine;
  if (s == "l2") return Metric::kL2;
  Metric m;
  if (s == "ip" || s == "dot") {
    m = Metric::kInnerProduct;
  } else if (s == "angular") {
    m = Metric::kCosine;
  } else if (s == "euclidean") {
    m = Metric::kL2;
  } else {
    throw Error(what + ": unknown metric '" + s + "' (allowed: inner_product, cosine, l2)");
  }
  if (deprecation)
    *deprecation = what + ": '" + s + "' is a deprecated alias of '" + to_string(m) + "' (the ann-benchmarks " +
                   "distance name); write " + to_string(m);
  return m;
}
Dtype parse_dtype(const std::string& s, const std::string& what) {
  if (s == "float32") return Dtype::kFloat32;
  if (s == "float16") return Dtype::kFloat16;
  if (s == "bfloat16") return Dtype::kBFloat16;
  throw Error(what + ": unknown dtype '" + s + "' (allowed: float32, float16, bfloat16)");
}
EngineBackend parse_engine_backend(const std::string& s, const std::string& what) {
  if (s == "auto") return EngineBackend::kAuto;
  if (s == "cpu") return EngineBackend::kCpu;
  if (s == "cuda") return EngineBackend::kCuda;
  throw Error(what + ": unknown engine backend '" + s + "' (allowed: auto, cpu, cuda)");
}
CommBackend parse_comm_backend(const std::string& s, const std::string& what) {
  if (s == "auto") return CommBackend::kAuto;
  if (s == "mpi") return CommBackend::kMpi;
  if (s == "nccl") return CommBackend::kNccl;
  throw Error(what + ": unknown communicator backend '" + s + "' (allowed: auto, mpi, nccl)");
}

std::string to_string(AttributeType t) { return t == AttributeType::kInt64 ? "int64" : "float64"; }
std::string to_string(MemSpace s) { return s == MemSpace::kHost ? "host" : "device"; }
std::string to_string(ScanRows r) { return r == ScanRows::kAuto ? "auto" : "2"; }
std::string to_string(ScanSchedule s) {
  switch (s) {
    case ScanSchedule::kAuto: return "auto";
    case ScanSchedule::kBlocked: return "blocked";
    case ScanSchedule::kPersistent: return "persistent";
  }
  return "?";
}
std::string to_string(SearchPath p) {
  switch (p) {
    case SearchPath::kAuto: return "auto";
    case SearchPath::kScan: return "scan";
    case SearchPath::kGemm: return "gemm";
    case SearchPath::kFew: return "few";
    case SearchPath::kCublas: return "cublas";
  }
  return "?";
}
std::string to_string(FilterScan f) {
  switch (f) {
    case FilterScan::kAuto: return "auto";
    case FilterScan::kDense: return "dense";
    case FilterScan::kGathered: return "gathered";
  }
  return "?";
}
std::string to_string(CpuIsa i) {
  switch (i) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kPortable: return "portable";
  }
  return "?";
}

ScanRows parse_scan_rows(const std::string& s, const std::string& what) {
  if (s == "auto") return ScanRows::kAuto;
  if (s == "2") return ScanRows::kTwo;
  throw Error(what + ": '" + s + "' is not allowed (allowed: auto, 2)");
}
ScanSchedule parse_scan_schedule(const std::string& s, const std::string& what) {
  if (s == "auto") return ScanSchedule::kAuto;
  if (s == "blocked") return ScanSchedule::kBlocked;
  if (s == "persistent") return ScanSchedule::kPersistent;
  throw Error(what + ": '" + s + "' is not allowed (allowed: auto, blocked, persistent)");
}
SearchPath parse_search_path(const std::string& s, const std::string& what) {
  if (s == "auto") return SearchPath::kAuto;
  if (s == "scan") return SearchPath::kScan;
  if (s == "gemm") return SearchPath::kGemm;
  if (s == "few") return SearchPath::kFew;
  if (s == "cublas") return SearchPath::kCublas;
  throw Error(what + ": '" + s + "' is not allowed (allowed: auto, scan, gemm, few, cublas)");
}
FilterScan parse_filter_scan(const std::string& s, const std::string& what) {
  if (s == "auto") return FilterScan::kAuto;
  if (s == "dense") return FilterScan::kDense;
  if (s == "gathered") return FilterScan::kGathered;
  throw Error(what + ": '" + s + "' is not allowed (allowed: auto, dense, gathered)");
}
CpuIsa parse_cpu_isa(const std::string& s, const std::string& what) {
  if (s == "auto") return CpuIsa::kAuto;
  if (s == "avx512") return CpuIsa::kAvx512;
  if (s == "avx2") return CpuIsa::kAvx2;
  if (s == "portable") return CpuIsa::kPortable;
  throw Error(what + ": '" + s + "' is not allowed (allowed: auto, avx512, avx2, portable)");
}

std::size_t dtype_bytes(Dtype d) { return d == Dtype::kFloat32 ? 4 : 2; }
std::size_t format_bytes(RowFormat f) { return f == RowFormat::kFloat16Bits ? 2 : 4; }

const char* version() { return SHARDTOPK_VERSION; }

}  // namespace shardtopk
