// kernels/query_prep: query validation and cosine normalisation (bit for bit the host's
// normalize_rows, the float64 reference), and the batched path's per-query inputs (the padded
// exact query, the GEMM's rounded query, Δ at least the float64 error of that rounding).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/query_prep.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::QueryInfo;
using cuda_detail::QueryProblem;

/// Runs validate_queries on a copy of q [batch, dim]; returns the status word, *out the queries after.
unsigned long long validate(const std::vector<float>& q, int batch, std::int64_t dim, bool normalize,
                            std::vector<float>* out) {
  DeviceArray<float> dq(q);
  DeviceArray<unsigned long long> status(1, 0x00);
  cuda_detail::validate_queries(dq.get(), batch, dim, normalize, status.get(), nullptr);
  *out = dq.download();
  return status.download()[0];
}

// Cosine normalisation on the device equals normalize_rows() (float64 norm in column order,
// x · (1 / norm) rounded once) bit for bit: widths 1, 7, 1,000 and 4,099 (beyond a block's
// threads), batches of 1 and 300, magnitudes from 1e-20 to 1e20, one-hot queries.
TEST(QueryPrep, CosineNormalisationEqualsNormalizeRowsBitForBit) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t dim : {1, 7, 1000, 4099}) {
    for (const int batch : {1, 300}) {
      std::vector<float> q = random_floats(static_cast<size_t>(batch * dim), 10 + dim);
      for (int i = 0; i < batch; ++i) {
        const float scale = i % 4 == 1 ? 1e-20f : i % 4 == 2 ? 1e20f : 1.0f;
        for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] *= scale;
        if (i % 4 == 3) {
          for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = d == dim / 2 ? -3.0f : 0.0f;
        }
      }
      std::vector<float> host = q;
      normalize_rows(host.data(), batch, dim, 0, "query");
      std::vector<float> dev;
      EXPECT_EQ(validate(q, batch, dim, true, &dev), cuda_detail::kQueriesOk) << "dim " << dim;
      int bad = 0;
      for (size_t i = 0; i < dev.size(); ++i)
        if (bits_of(dev[i]) != bits_of(host[i]) && ++bad <= 5)
          ADD_FAILURE() << "dim " << dim << " batch " << batch << ": query " << i / dim << " column " << i % dim
                        << ": device " << dev[i] << ", normalize_rows " << host[i];
      EXPECT_EQ(bad, 0) << "dim " << dim << " batch " << batch;
      // without normalisation the queries stay as they are
      EXPECT_EQ(validate(q, batch, dim, false, &dev), cuda_detail::kQueriesOk);
      EXPECT_EQ(dev, q) << "validation alone must not change a query";
    }
  }
}

// The status names the first bad query of the batch and, within it, the first non-finite
// column; a zero query is an error for cosine only; a query with a non-finite value is left
// untouched, the others are normalised.
TEST(QueryPrep, StatusNamesTheFirstBadQueryAndColumn) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t dim = 37;
  const int batch = 6;
  const std::vector<float> good = small_ints(static_cast<size_t>(batch * dim), 13, 1, 2);  // no zero query
  std::vector<float> out;

  std::vector<float> bad = good;
  bad[4 * dim + 1] = std::numeric_limits<float>::quiet_NaN();
  bad[2 * dim + 30] = std::numeric_limits<float>::infinity();
  bad[2 * dim + 5] = -std::numeric_limits<float>::infinity();
  for (const bool normalize : {false, true}) {
    const unsigned long long st = validate(bad, batch, dim, normalize, &out);
    ASSERT_NE(st, cuda_detail::kQueriesOk);
    const QueryProblem p = cuda_detail::decode_query_status(st);
    EXPECT_EQ(p.query, 2);
    EXPECT_EQ(p.column, 5);
    EXPECT_FALSE(p.zero_norm);
    for (std::int64_t d = 0; d < dim; ++d)
      EXPECT_EQ(bits_of(out[2 * dim + d]), bits_of(bad[2 * dim + d])) << "the bad query is left untouched, column " << d;
  }

  std::vector<float> zero = good;
  std::fill(zero.begin() + 3 * dim, zero.begin() + 4 * dim, 0.0f);
  std::fill(zero.begin() + 5 * dim, zero.begin() + 6 * dim, 0.0f);
  EXPECT_EQ(validate(zero, batch, dim, false, &out), cuda_detail::kQueriesOk) << "a zero query is valid without cosine";
  const unsigned long long st = validate(zero, batch, dim, true, &out);
  ASSERT_NE(st, cuda_detail::kQueriesOk);
  const QueryProblem p = cuda_detail::decode_query_status(st);
  EXPECT_EQ(p.query, 3);
  EXPECT_TRUE(p.zero_norm);
  std::vector<float> host(good.begin(), good.begin() + dim);
  normalize_rows(host.data(), 1, dim, 0, "query");
  for (std::int64_t d = 0; d < dim; ++d) EXPECT_EQ(bits_of(out[d]), bits_of(host[d])) << "query 0 is still normalised";
  // a query past 2^24 elements into the batch keeps its position in the status word
  const QueryProblem far = cuda_detail::decode_query_status((70000ull << 40) | (4098ull << 1));
  EXPECT_EQ(far.query, 70000);
  EXPECT_EQ(far.column, 4098);
}

/// The host's TF32 rounding (cvt.rna.tf32.f32): the low 13 mantissa bits dropped, rounding to
/// nearest with ties away from zero.
float tf32(float x) {
  std::uint32_t u = bits_of(x);
  u = (u + 0x1000u) & ~0x1FFFu;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// prepare_batched_queries for every storage type and both metric families: qpad is the query
// zero-padded to dpad; qhat is the query rounded to the storage type after a power-of-two scale
// (TF32 without scale for float32); the scale keeps every GEMM output below 2^15 for float16;
// qsq is ‖q‖²; and Δ is at least the float64 error of the rounded query against every row of
// a shard whose largest ‖x‖² is max_sq (2 × for l2), plus the exact arithmetic's error.
TEST(QueryPrep, BatchedQueryInputs) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int batch = 5;
  for (const std::int64_t dim : {1, 7, 100, 768}) {
    const std::int64_t nrows = 300;
    const std::vector<float> rows = random_floats(static_cast<size_t>(nrows * dim), 40 + dim, -3.0f, 3.0f);
    for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16}) {
      const std::vector<float> stored = rounded(dt, rows);
      double max_sq = 0.0;
      for (std::int64_t r = 0; r < nrows; ++r) {
        double s = 0.0;
        for (std::int64_t d = 0; d < dim; ++d) s += static_cast<double>(stored[r * dim + d]) * stored[r * dim + d];
        max_sq = std::max(max_sq, s);
      }
      const std::int64_t dpad = cuda_detail::padded_dim(dim, dt);
      for (const bool l2 : {false, true}) {
        // magnitudes up to the admission bounds (‖q‖ · max‖x‖, and for l2 (‖q‖ + max‖x‖)², below FLT_MAX / 2)
        std::vector<float> q = random_floats(static_cast<size_t>(batch * dim), 50 + dim);
        const float big = l2 ? 1e15f : 1e30f;
        const float qscale[batch] = {1.0f, 1e-30f, big, 3.0e-3f, 7.0f};
        for (int i = 0; i < batch; ++i)
          for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] *= qscale[i];
        const std::string what = std::string(dname(dt)) + (l2 ? " l2" : " ip") + " D=" + std::to_string(dim);
        DeviceArray<float> dq(q), qpad(static_cast<size_t>(batch * dpad), 0xFF);
        DeviceArray<std::uint8_t> qhat(static_cast<size_t>(batch * dpad) * dtype_bytes(dt), 0xFF);
        DeviceArray<QueryInfo> qinfo(batch, 0xFF);
        cuda_detail::prepare_batched_queries(dq.get(), batch, dim, dpad, dt, l2, max_sq, qpad.get(), qhat.get(),
                                             qinfo.get(), nullptr);
        const std::vector<float> pad = qpad.download();
        const std::vector<std::uint8_t> hat_raw = qhat.download();
        const std::vector<QueryInfo> info = qinfo.download();
        for (int i = 0; i < batch; ++i) {
          const std::string at = what + " query " + std::to_string(i);
          const QueryInfo& qi = info[i];
          int e = 0;
          ASSERT_EQ(std::frexp(qi.inv_scale, &e), 0.5f) << at << ": the scale must be a power of two";
          const double scale = 1.0 / qi.inv_scale;
          if (dt == Dtype::kFloat32) {
            EXPECT_EQ(scale, 1.0) << at;
          }
          double nq2 = 0.0, err_sq = 0.0, max_scaled = 0.0;
          std::vector<double> back(static_cast<size_t>(dim));
          for (std::int64_t d = 0; d < dpad; ++d) {
            const float v = d < dim ? q[i * dim + d] : 0.0f;
            EXPECT_EQ(bits_of(pad[i * dpad + d]), bits_of(v)) << at << " qpad column " << d;
            float h = 0.0f;
            if (dt == Dtype::kFloat32) {
              std::memcpy(&h, &hat_raw[(i * dpad + d) * 4], 4);
              EXPECT_EQ(bits_of(h), bits_of(tf32(v))) << at << " qhat column " << d;
            } else {
              std::uint16_t raw = 0;
              std::memcpy(&raw, &hat_raw[(i * dpad + d) * 2], 2);
              h = dt == Dtype::kBFloat16 ? half::from_bf16(raw) : half::from_f16(raw);
              const float want = round_through(dt, static_cast<float>(static_cast<double>(v) * scale));
              EXPECT_EQ(bits_of(h), bits_of(want)) << at << " qhat column " << d << " (scale " << scale << ")";
              max_scaled = std::max(max_scaled, std::fabs(static_cast<double>(v) * scale));
            }
            if (d < dim) {
              back[d] = static_cast<double>(h) / scale;
              nq2 += static_cast<double>(v) * v;
              err_sq += (back[d] - v) * (back[d] - v);
            }
          }
          EXPECT_LT(max_scaled, 32768.0) << at << ": the scaled query leaves the storage type's safe range";
          if (dt == Dtype::kFloat16) {
            EXPECT_LT(std::sqrt(nq2) * std::sqrt(max_sq) * scale, 65504.0) << at << ": a __half GEMM output could overflow";
          }
          // ‖q‖² as a float: within a rounding, 0 below float's range, inf above it
          if (nq2 < std::numeric_limits<float>::max()) {
            EXPECT_NEAR(qi.qsq, nq2, std::max(nq2 * 1.2e-7, 1e-44)) << at;
          } else {
            EXPECT_TRUE(std::isinf(qi.qsq)) << at << ": qsq " << qi.qsq;
          }
          // Δ against every row: |(q̂ − q) · x| (×2 for l2) plus the exact path's rounding
          double worst = 0.0;
          for (std::int64_t r = 0; r < nrows; ++r) {
            double e_dot = 0.0;
            for (std::int64_t d = 0; d < dim; ++d) e_dot += (back[d] - q[i * dim + d]) * stored[r * dim + d];
            worst = std::max(worst, std::fabs(e_dot) * (l2 ? 2.0 : 1.0));
          }
          EXPECT_TRUE(std::isfinite(qi.delta) && qi.delta > 0.0f) << at << ": delta " << qi.delta;
          EXPECT_GE(static_cast<double>(qi.delta), worst) << at << ": Δ below the rounding error it must bound";
          EXPECT_GE(static_cast<double>(qi.delta), std::sqrt(err_sq * max_sq) * (l2 ? 2.0 : 1.0))
              << at << ": Δ below ‖q̂ − q‖ · max‖x‖";
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardtopk::test
