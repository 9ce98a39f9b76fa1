// Merging planned writes (src/index/write_ops.hpp): a group of ops applied as one gives every
// rank's slots exactly the state the ops give one after the other (random groups planned on a
// RowDirectory, as rank 0 plans them), each rank's rows contiguous, and the norm bound of the rows
// kept (a row killed within the group never counts); the merged op survives the broadcast form.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "index/admission.hpp"
#include "index/row_directory.hpp"
#include "index/write_ops.hpp"

namespace shardtopk {
namespace {

constexpr std::int64_t kDim = 3;
constexpr std::size_t kColumns = 2;

/// A slot's contents as the engines hold them.
struct Slot {
  bool live = false;
  std::int64_t id = -1;
  std::vector<float> v;
  std::vector<std::uint64_t> cols;
  bool operator==(const Slot& o) const { return std::tie(live, id, v, cols) == std::tie(o.live, o.id, o.v, o.cols); }
};
using Slots = std::map<std::pair<int, std::int64_t>, Slot>;

void apply(Slots& s, const WriteOp& op) {
  for (const SlotRef& k : op.kills) s[{k.rank, k.slot}].live = false;
  for (std::size_t i = 0; i < op.ids.size(); ++i) {
    Slot& t = s[{op.places[i].rank, op.places[i].slot}];
    t.live = true;
    t.id = op.ids[i];
    t.v.assign(op.vectors.begin() + static_cast<std::ptrdiff_t>(i * kDim),
               op.vectors.begin() + static_cast<std::ptrdiff_t>((i + 1) * kDim));
    t.cols.clear();
    for (const auto& c : op.columns) t.cols.push_back(c[i]);
  }
}

/// The live slots only (a dead slot's stale contents are never read).
Slots live_only(const Slots& s) {
  Slots out;
  for (const auto& [k, v] : s)
    if (v.live) out[k] = v;
  return out;
}

/// Plans `n` random upserts (1..4 rows, ids 0..29, replacing live ones) and deletes on `dir`,
/// as rank 0 does: the old rows of replaced ids die first, then the new rows are placed.
std::vector<WriteOp> plan(RowDirectory& dir, int n, std::mt19937_64& rng, std::uint64_t* seq) {
  std::vector<WriteOp> ops;
  for (int k = 0; k < n; ++k) {
    WriteOp op;
    op.seq = ++*seq;
    op.columns.resize(kColumns);
    std::vector<std::int64_t> ids;
    const int rows = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < rows; ++i) {
      const std::int64_t id = static_cast<std::int64_t>(rng() % 30);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    if (rng() % 3 == 0) {  // a delete of the live ones
      for (auto id : ids)
        if (dir.find(id)) op.kills.push_back(dir.erase(id));
    } else {
      std::int64_t fresh = 0;
      for (auto id : ids) fresh += dir.find(id) ? 0 : 1;
      if (fresh > dir.free_slots()) continue;
      for (auto id : ids)
        if (dir.find(id)) op.kills.push_back(dir.erase(id));
      NormSummary best;
      for (auto id : ids) {
        op.places.push_back(dir.place(id));
        op.ids.push_back(id);
        for (std::int64_t d = 0; d < kDim; ++d) op.vectors.push_back(static_cast<float>(rng() % 2001) / 100.0f - 10.0f);
        for (auto& c : op.columns) c.push_back(rng());
        const double norm = shard_norms(op.vectors.data() + (op.ids.size() - 1) * kDim, 1, kDim, 0, 1).max_norm;
        op.norms.push_back(norm);
        if (best.row < 0 || norm > best.max_norm) best = NormSummary{norm, id};
      }
      op.max_norm = best.max_norm;
      op.max_norm_id = best.row;
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

TEST(WriteOps, AMergedGroupLeavesEverySlotAsTheOpsOneAfterAnotherDo) {
  std::mt19937_64 rng(7);
  RowDirectory dir({4, 3, 5}, {12, 12, 12}, {});
  std::uint64_t seq = 0;
  Slots sequential, merged;
  for (int r = 0, lo = 0; r < 3; lo += std::vector<int>{4, 3, 5}[r], ++r)
    for (int s = 0; s < std::vector<int>{4, 3, 5}[r]; ++s) {
      Slot t{true, lo + s, std::vector<float>(kDim, 1.0f), std::vector<std::uint64_t>(kColumns, 0)};
      sequential[{r, s}] = merged[{r, s}] = t;
    }
  int groups_with_reuse = 0;
  for (int g = 0; g < 300; ++g) {
    std::vector<WriteOp> ops = plan(dir, 1 + static_cast<int>(rng() % 12), rng, &seq);
    if (ops.empty()) continue;
    for (const WriteOp& op : ops) apply(sequential, op);
    // A slot written twice, or killed after it was written, within the group.
    std::map<std::pair<int, std::int64_t>, int> writes;
    for (const WriteOp& op : ops)
      for (const SlotRef& p : op.places) groups_with_reuse += ++writes[{p.rank, p.slot}] == 2 ? 1 : 0;
    const std::uint64_t last_seq = ops.back().seq;
    WriteOp m = merge_write_ops(std::move(ops), kDim, kColumns);
    EXPECT_EQ(m.seq, last_seq);
    for (std::size_t i = 1; i < m.places.size(); ++i) EXPECT_LE(m.places[i - 1].rank, m.places[i].rank) << "rank groups";
    // Through the broadcast form, as the followers get it.
    const std::vector<std::uint8_t> bytes = encode_write_ops({m}, kDim);
    const std::vector<WriteOp> back = decode_write_ops(bytes.data(), bytes.size(), kDim, static_cast<int>(kColumns));
    ASSERT_EQ(back.size(), 1u);
    apply(merged, back[0]);
    ASSERT_EQ(live_only(merged), live_only(sequential)) << "group " << g;
    // Its norm bound: the largest norm of the rows kept, and that row's id.
    double want = 0.0;
    std::int64_t want_id = -1;
    for (std::size_t i = 0; i < m.ids.size(); ++i) {
      const double n = shard_norms(m.vectors.data() + i * kDim, 1, kDim, 0, 1).max_norm;
      if (want_id < 0 || n > want) {
        want = n;
        want_id = m.ids[i];
      }
    }
    EXPECT_EQ(back[0].max_norm, want);
    if (!m.ids.empty()) EXPECT_EQ(back[0].max_norm_id, want_id);
  }
  EXPECT_GT(groups_with_reuse, 20) << "the groups should exercise slots written twice";
}

/// Field by field (the planning-only norms aside).
void expect_same_op(const WriteOp& a, const WriteOp& b, int group) {
  SCOPED_TRACE("group " + std::to_string(group));
  auto refs = [](const std::vector<SlotRef>& v) {
    std::vector<std::pair<std::int32_t, std::int64_t>> out;
    for (const SlotRef& p : v) out.emplace_back(p.rank, p.slot);
    return out;
  };
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(refs(a.kills), refs(b.kills));
  EXPECT_EQ(refs(a.places), refs(b.places));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.vectors, b.vectors);
  EXPECT_EQ(a.columns, b.columns);
  EXPECT_EQ(a.max_norm, b.max_norm);
  EXPECT_EQ(a.max_norm_id, b.max_norm_id);
}

// A replay merges group after group into the same kept op, encodes it into the same bytes and
// the followers decode into the same ops: what a larger earlier group left in those buffers must
// never show through.
TEST(WriteOps, BuffersKeptFromALargerGroupGiveTheOpsFreshBuffersGive) {
  std::mt19937_64 rng(11);
  RowDirectory dir({4, 3, 5}, {12, 12, 12}, {});
  std::uint64_t seq = 0;
  WriteOp kept;
  std::vector<std::uint8_t> kept_bytes;
  std::vector<WriteOp> kept_back;
  int shrinking = 0;
  std::size_t previous_rows = 0;
  for (int g = 0; g < 200; ++g) {
    const int n = g % 5 == 0 ? 40 : 1 + static_cast<int>(rng() % 6);  // a large group, then smaller ones
    std::vector<WriteOp> ops = plan(dir, n, rng, &seq);
    if (ops.empty()) continue;
    std::vector<WriteOp> copy = ops;
    const WriteOp fresh = merge_write_ops(std::move(copy), kDim, kColumns);
    merge_write_ops(std::move(ops), kDim, kColumns, &kept);
    expect_same_op(kept, fresh, g);
    shrinking += kept.ids.size() < previous_rows ? 1 : 0;
    previous_rows = kept.ids.size();
    encode_write_ops({kept}, kDim, &kept_bytes);
    EXPECT_EQ(kept_bytes, encode_write_ops({fresh}, kDim));
    decode_write_ops(kept_bytes.data(), kept_bytes.size(), kDim, static_cast<int>(kColumns), &kept_back);
    ASSERT_EQ(kept_back.size(), 1u);
    expect_same_op(kept_back[0], fresh, g);
  }
  EXPECT_GT(shrinking, 20) << "groups smaller than the one before should reuse larger buffers";
}

TEST(WriteOps, ARowKilledWithinTheGroupNeverCountsForTheNormBound) {
  auto op_of = [](std::uint64_t seq, std::vector<SlotRef> kills, std::vector<SlotRef> places,
                  std::vector<std::int64_t> ids, std::vector<float> v, bool with_norms) {
    WriteOp op;
    op.seq = seq;
    op.kills = std::move(kills);
    op.places = std::move(places);
    op.ids = std::move(ids);
    op.vectors = std::move(v);
    op.columns.assign(kColumns, std::vector<std::uint64_t>(op.ids.size(), 9));
    NormSummary best;
    for (std::size_t i = 0; i < op.ids.size(); ++i) {
      const double n = shard_norms(op.vectors.data() + i * kDim, 1, kDim, 0, 1).max_norm;
      if (with_norms) op.norms.push_back(n);
      if (best.row < 0 || n > best.max_norm) best = NormSummary{n, op.ids[i]};
    }
    op.max_norm = best.max_norm;
    op.max_norm_id = best.row;
    return op;
  };
  for (bool with_norms : {true, false}) {
    SCOPED_TRACE(with_norms ? "norms planned" : "norms measured");
    std::vector<WriteOp> ops;
    // Rows 1 (norm 5) and 2 (norm 13) into slots 0 and 1 of rank 0; then row 2 dies.
    ops.push_back(op_of(1, {}, {{0, 0}, {0, 1}}, {1, 2}, {3, 4, 0, 5, 12, 0}, with_norms));
    ops.push_back(op_of(2, {{0, 1}}, {}, {}, {}, with_norms));
    WriteOp m = merge_write_ops(std::move(ops), kDim, kColumns);
    EXPECT_EQ(m.max_norm, 5.0);
    EXPECT_EQ(m.max_norm_id, 1);
    ASSERT_EQ(m.ids, std::vector<std::int64_t>{1});
    ASSERT_EQ(m.kills.size(), 1u);  // the slot that died: dead already, killing it again is harmless
  }
}

}  // namespace
}  // namespace shardtopk
