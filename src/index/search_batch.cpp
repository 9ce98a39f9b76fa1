// Admission of search batches (search_batch.hpp): the one check of k, the batch, its filters and
// its values, and the composition of admitted requests into one batch.
#include "shardtopk/search_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "index/admission.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

/// A digest of a program that equal programs share (FilterProgram::operator==: the sizes, the
/// instructions' bytes and the constants), from the sizes, the instructions and at most the first
/// and last four constants of each pool: O(1) for an ids_in list of a million ids.
std::uint64_t program_digest(const FilterProgram& f) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  const auto mix = [&h](std::uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<std::uint64_t>(f.max_stack()));
  mix(f.ops().size());
  mix(f.ints().size());
  mix(f.reals().size());
  for (const FilterOp& op : f.ops()) {
    std::uint64_t w[2];
    std::memcpy(w, &op, sizeof w);
    mix(w[0]);
    mix(w[1]);
  }
  const auto sample = [&mix](const auto& pool) {
    const std::size_t n = pool.size();
    for (std::size_t i = 0; i < n; i = i + 1 == 4 && n > 8 ? n - 4 : i + 1) {
      std::uint64_t bits;
      std::memcpy(&bits, &pool[i], 8);
      mix(bits);
    }
  };
  sample(f.ints());
  sample(f.reals());
  return h;
}

/// Where `f` (digest d) is among `programs` (digests `digests`, one per program): the same
/// object or an equal program; programs.size() when absent. A batch of 256 different filters
/// compared each new program with every earlier one (350 µs on a 2-core host); the digests
/// leave a full comparison only to programs that share one.
std::size_t find_program(const std::vector<const FilterProgram*>& programs, const std::vector<std::uint64_t>& digests,
                         const FilterProgram* f, std::uint64_t d) {
  for (std::size_t j = 0; j < programs.size(); ++j)
    if (digests[j] == d && (programs[j] == f || *programs[j] == *f)) return j;
  return programs.size();
}

}  // namespace

void check_k(long long k, std::int64_t k_max, std::int64_t k_rows) {
  const std::int64_t kmax = std::min<std::int64_t>(k_max, k_rows);
  SHARDTOPK_EXPECTS(k >= 1 && k <= kmax, "k=", k, " out of range: allowed 1 .. ", kmax,
                    (k <= kmax ? "" : kmax == k_rows ? " (the corpus rows)" : " (search.k_max)"));
}

Admission::Admission(SearchLimits limits) : limits_(std::move(limits)) {}

SearchLimits Admission::limits() const {
  std::lock_guard<std::mutex> l(mu_);
  return limits_;
}

void Admission::set_norm_bound(double norm, std::int64_t row) {
  std::lock_guard<std::mutex> l(mu_);
  limits_.max_row_norm = norm;
  limits_.max_row_norm_row = row;
}

void Admission::admit_shape(SearchBatch* b, int batch, long long k, const FilterProgram* const* filters) const {
  check_k(k, limits_.k_max, limits_.k_rows);
  SHARDTOPK_EXPECTS(batch >= 1 && batch <= limits_.batch_max, "batch of ", batch,
                    " queries out of range: allowed 1 .. ", limits_.batch_max, " (search.batch_max)");
  b->size_ = batch;
  b->k_ = static_cast<int>(k);
  b->programs_.clear();
  b->program_digests_.clear();
  b->query_program_.clear();
  if (!filters) return;
  // Each distinct program once (equal programs, not only the same object); programs that pass
  // every row filter nothing and are left out.
  for (int q = 0; q < batch; ++q) {
    const FilterProgram* f = filters[q];
    if (!f || f->passes_everything()) continue;
    if (b->programs_.empty()) b->query_program_.assign(static_cast<std::size_t>(batch), -1);
    const std::uint64_t d = program_digest(*f);
    const std::size_t j = find_program(b->programs_, b->program_digests_, f, d);
    if (j == b->programs_.size()) {
      check_filter_fits(*f, limits_.schema);
      SHARDTOPK_EXPECTS(static_cast<int>(j) < limits_.max_filters, "the batch holds more than ", limits_.max_filters,
                        " distinct filters (search.max_filters)");
      b->programs_.push_back(f);
      b->program_digests_.push_back(d);
    }
    b->query_program_[static_cast<std::size_t>(q)] = static_cast<std::int32_t>(j);
  }
}

void Admission::admit_values(SearchBatch* b, const float* queries) const {
  SHARDTOPK_EXPECTS(queries != nullptr, "no queries given");
  NormSummary corpus;
  {
    std::lock_guard<std::mutex> l(mu_);  // the bound only: requests are checked in parallel
    corpus = NormSummary{limits_.max_row_norm, limits_.max_row_norm_row};
  }
  admit_query_values(limits_.metric, corpus, queries, b->size_, limits_.dim);
  b->queries_ = queries;
  b->admitted_norm_ = corpus.max_norm;
}

SearchBatch Admission::admit(const float* queries, int batch, long long k, const FilterProgram* const* filters) const {
  SearchBatch b;
  admit_shape(&b, batch, k, filters);
  admit_values(&b, queries);
  return b;
}

SearchBatch Admission::admit(const float* queries, int batch, long long k, const FilterProgram* const* filters,
                             const QueryBounds* bounds, bool stats) const {
  SearchBatch b;
  admit_shape(&b, batch, k, filters);
  admit_bounds(&b, bounds);
  admit_values(&b, queries);
  b.stats_ = stats;
  return b;
}

// Reported units → ranking scores: l2 distances are negated (exactly), so the windows compare
// the bits the engines rank by.
void Admission::admit_bounds(SearchBatch* b, const QueryBounds* bounds) const {
  b->windows_.clear();
  if (!bounds) return;
  const bool l2 = limits_.metric == Metric::kL2;
  const char* bound_name = l2 ? "max_distance" : "min_score";
  std::vector<QueryWindow> w(static_cast<std::size_t>(b->size_));
  bool any = false;
  for (int q = 0; q < b->size_; ++q) {
    const QueryBounds& x = bounds[q];
    if (x.has_after) {
      SHARDTOPK_EXPECTS(std::isfinite(x.after_score), "query ", q, ": search_after score ", x.after_score,
                        " is not finite");
      SHARDTOPK_EXPECTS(!l2 || x.after_score >= 0, "query ", q, ": search_after distance ", x.after_score,
                        " is negative (l2 reports squared distances)");
      w[static_cast<std::size_t>(q)].after = Candidate{l2 ? -x.after_score : x.after_score, x.after_id};
      any = true;
    }
    if (x.has_bound) {
      SHARDTOPK_EXPECTS(std::isfinite(x.bound), "query ", q, ": ", bound_name, " ", x.bound, " is not finite");
      w[static_cast<std::size_t>(q)].floor = Candidate{l2 ? -x.bound : x.bound, x.bound_id};
      w[static_cast<std::size_t>(q)].count = 1;
      any = true;
    }
  }
  if (any) b->windows_ = std::move(w);
}

SearchBatch Admission::admit_device(const float* d_queries, void* cuda_stream, int batch, long long k,
                                    const FilterProgram* const* filters) const {
  SHARDTOPK_EXPECTS(limits_.device_queries, "device queries need the CUDA engine (this index runs on the CPU "
                    "engine); pass host queries");
  SearchBatch b;
  admit_shape(&b, batch, k, filters);
  SHARDTOPK_EXPECTS(d_queries != nullptr, "no queries given");
  b.queries_ = d_queries;
  b.on_device_ = true;
  b.stream_ = cuda_stream;
  return b;
}

void Admission::recheck_norms(const SearchBatch& batch) const {
  if (batch.on_device_ || batch.size_ == 0) return;
  NormSummary corpus;
  {
    std::lock_guard<std::mutex> l(mu_);
    corpus = NormSummary{limits_.max_row_norm, limits_.max_row_norm_row};
  }
  if (!(batch.admitted_norm_ < corpus.max_norm)) return;  // the common case: one compare
  admit_query_values(limits_.metric, corpus, batch.queries_, batch.size_, limits_.dim);
}

// ------------------------------------------------------------------------------ composition

BatchComposer::BatchComposer(int batch_max, int max_filters, std::int64_t dim)
    : batch_max_(batch_max), max_filters_(max_filters), dim_(dim) {
  SHARDTOPK_EXPECTS(batch_max >= 1 && max_filters >= 1 && dim >= 1, "BatchComposer: batch_max ", batch_max,
                    ", max_filters ", max_filters, ", dim ", dim, " must be positive");
  const auto bm = static_cast<std::size_t>(batch_max);
  parts_.reserve(bm);
  part_first_program_.reserve(bm);
  program_map_.reserve(bm * static_cast<std::size_t>(max_filters));
  queries_.resize(bm * static_cast<std::size_t>(dim));
  batch_.programs_.reserve(static_cast<std::size_t>(max_filters));
  batch_.program_digests_.reserve(static_cast<std::size_t>(max_filters));
  batch_.query_program_.reserve(bm);
  batch_.windows_.reserve(bm);
}

void BatchComposer::clear() {
  rows_ = 0;
  parts_.clear();
  part_first_program_.clear();
  program_map_.clear();
  batch_.programs_.clear();
  batch_.program_digests_.clear();
  batch_.size_ = 0;
  batch_.k_ = 0;
  batch_.admitted_norm_ = 0;
  batch_.stats_ = false;
  batch_.windows_.clear();
}

bool BatchComposer::add(const SearchBatch& request) {
  SHARDTOPK_EXPECTS(!request.on_device_ && request.size_ >= 1, "BatchComposer: an admitted host request is required");
  if (!parts_.empty() && request.k_ != batch_.k_) return false;
  if (rows_ + request.size_ > batch_max_) return false;
  // The request's programs into the batch's distinct ones; undone when one too many.
  const std::size_t programs_before = batch_.programs_.size(), map_before = program_map_.size();
  for (std::size_t i = 0; i < request.programs_.size(); ++i) {
    const FilterProgram* f = request.programs_[i];
    const std::uint64_t d = request.program_digests_[i];  // from its admission
    const std::size_t j = find_program(batch_.programs_, batch_.program_digests_, f, d);
    if (j == batch_.programs_.size()) {
      if (static_cast<int>(j) >= max_filters_) {
        batch_.programs_.resize(programs_before);
        batch_.program_digests_.resize(programs_before);
        program_map_.resize(map_before);
        return false;
      }
      batch_.programs_.push_back(f);
      batch_.program_digests_.push_back(d);
    }
    program_map_.push_back(static_cast<std::int32_t>(j));
  }
  batch_.stats_ = batch_.stats_ || request.stats_;
  batch_.admitted_norm_ = parts_.empty() ? request.admitted_norm_ : std::min(batch_.admitted_norm_, request.admitted_norm_);
  batch_.k_ = request.k_;
  parts_.push_back(&request);
  part_first_program_.push_back(static_cast<std::int32_t>(map_before));
  rows_ += request.size_;
  return true;
}

const SearchBatch& BatchComposer::batch() {
  batch_.size_ = rows_;
  // One request: its own queries, admitted and held by the caller until the search returns (the
  // protocol copies them into its staging buffer once); several: laid end to end here.
  batch_.queries_ = parts_.size() == 1 ? parts_[0]->queries_ : queries_.data();
  batch_.query_program_.clear();
  if (!batch_.programs_.empty()) batch_.query_program_.assign(static_cast<std::size_t>(rows_), -1);
  batch_.windows_.clear();
  const bool windowed =
      std::any_of(parts_.begin(), parts_.end(), [](const SearchBatch* r) { return !r->windows_.empty(); });
  if (windowed) batch_.windows_.assign(static_cast<std::size_t>(rows_), QueryWindow{});
  std::int64_t row = 0;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    const SearchBatch& r = *parts_[p];
    if (parts_.size() > 1)
      std::memcpy(queries_.data() + row * dim_, r.queries_,
                  sizeof(float) * static_cast<std::size_t>(r.size_) * static_cast<std::size_t>(dim_));
    if (!r.programs_.empty())
      for (int q = 0; q < r.size_; ++q) {
        const std::int32_t i = r.query_program_[static_cast<std::size_t>(q)];
        batch_.query_program_[static_cast<std::size_t>(row + q)] =
            i < 0 ? -1 : program_map_[static_cast<std::size_t>(part_first_program_[p] + i)];
      }
    if (!r.windows_.empty()) std::copy(r.windows_.begin(), r.windows_.end(), batch_.windows_.begin() + row);
    row += r.size_;
  }
  return batch_;
}

}  // namespace shardtopk
