// Build an index from rows in memory and search it: the C++ side of the in-process API.
//
//   search_example [cpu|cuda|auto]           one process: the whole corpus
//   mpirun -np P search_example [backend]    P ranks: each builds its shard, rank 0 searches
//
// Every rank makes the same corpus (row i, column j: ((i * 7 + j * 3) % 11) - 5, small integers,
// so every score is exact and ties are common) and keeps its shard_rows() slice; rank 0 searches
// three queries, checks the answer against a plain double loop (higher score first, equal scores:
// smaller id first) and prints it; the other ranks follow rank 0 until it shuts the index down.
// Exit code 0 when the answer is right.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include <shardtopk/communicator.hpp>
#include <shardtopk/config.hpp>
#include <shardtopk/index.hpp>
#include <shardtopk/ingest.hpp>
#include <shardtopk/shard_plan.hpp>

namespace {

constexpr std::int64_t kRows = 5000, kDim = 24;
constexpr int kQueries = 3, kK = 5;

float value(std::int64_t row, std::int64_t col) { return static_cast<float>((row * 7 + col * 3) % 11 - 5); }

// The best kK ids of one query by a plain double loop over every row.
std::vector<std::int64_t> brute_force(const std::vector<float>& corpus, const float* q) {
  std::vector<double> score(kRows);
  for (std::int64_t i = 0; i < kRows; ++i) {
    double s = 0;
    for (std::int64_t j = 0; j < kDim; ++j) s += static_cast<double>(corpus[i * kDim + j]) * q[j];
    score[i] = s;
  }
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return score[a] > score[b]; });
  order.resize(kK);
  return order;
}

}  // namespace

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  try {
    shardtopk::Config cfg;
    shardtopk::apply_override(cfg, std::string("engine.backend=") + (argc > 1 ? argv[1] : "auto"));
    shardtopk::apply_override(cfg, "search.k_max=100");

    std::vector<float> corpus(kRows * kDim);
    for (std::int64_t i = 0; i < kRows; ++i)
      for (std::int64_t j = 0; j < kDim; ++j) corpus[i * kDim + j] = value(i, j);

    auto comm = shardtopk::make_mpi_communicator(cfg.comm.timeout_s);
    const int rank = comm->rank(), ranks = comm->world_size();
    const shardtopk::RowRange mine = shardtopk::shard_rows(kRows, ranks, rank);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(mine.size()));
    std::iota(ids.begin(), ids.end(), mine.lo);  // global ids: row positions
    shardtopk::ShardInput shard;
    shard.data = corpus.data() + mine.lo * kDim;
    shard.rows = mine.size();
    shard.dim = kDim;
    shard.ids = ids.data();
    auto index = shardtopk::build_index(cfg, shardtopk::Metric::kInnerProduct, kRows, mine, shard, std::move(comm));

    if (rank != 0) {
      index->follow();  // until rank 0 calls shutdown()
      return 0;
    }
    std::vector<float> queries(kQueries * kDim);
    for (int q = 0; q < kQueries; ++q)
      for (std::int64_t j = 0; j < kDim; ++j) queries[q * kDim + j] = value(q * 101 + 13, j);
    std::vector<std::int64_t> out_ids(kQueries * kK);
    std::vector<float> out_scores(kQueries * kK);
    // Admitted once (k, the batch, its values), then searched as given.
    const shardtopk::SearchBatch batch = index->admit(queries.data(), kQueries, kK);
    index->search(batch, out_ids.data(), out_scores.data());
    index->shutdown();

    int wrong = 0;
    std::printf("engine %s, %d rank(s), %lld rows x %lld\n", index->info().engine.name.c_str(), ranks,
                static_cast<long long>(kRows), static_cast<long long>(kDim));
    for (int q = 0; q < kQueries; ++q) {
      const std::vector<std::int64_t> want = brute_force(corpus, &queries[q * kDim]);
      std::printf("query %d:", q);
      for (int r = 0; r < kK; ++r) {
        std::printf(" %lld (%.0f)", static_cast<long long>(out_ids[q * kK + r]), out_scores[q * kK + r]);
        wrong += out_ids[q * kK + r] != want[r];
      }
      std::printf("\n");
    }
    std::printf("%s: %d wrong id(s)\n", wrong ? "FAILED" : "ok", wrong);
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "search_example: %s\n", e.what());
    return 2;
  }
}
