#pragma once
/// @file merge.hpp
/// Host k-way merge of candidate lists with the ordering rule.

#include <cstdint>

#include "shardtopk/ordering.hpp"

namespace shardtopk {

/// Merge `parts` sorted lists [parts, batch, k] (k innermost; each list best first by
/// `better()`) into out [batch, k], best first. Padding candidates lose to every real one.
/// Deterministic: the output depends only on the set of candidates, never on list order.
void merge_topk_host(const Candidate* lists, int parts, int batch, int k, Candidate* out);

/// The same with list p of query b at lists + p · list_stride + b · k (list_stride ≥ batch · k:
/// room between the lists, e.g. each rank's status slot in a gathered buffer).
void merge_topk_host(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out);

}  // namespace shardtopk
