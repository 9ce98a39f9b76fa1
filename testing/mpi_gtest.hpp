#pragma once
// GoogleTest under mpiexec: every rank runs every test (the index's calls are collective). Rank 0
// prints gtest's normal output; other ranks print their failures only, tagged "[rank r]", plus one
// result line per test so that per-rank logs can be counted; the exit code is the worst over all
// ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace shardtopk::test {

/// On ranks other than 0: failures only, tagged with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed()) std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, t.test_suite_name(), t.name());
    const char* tag = t.result()->Failed() ? "  FAILED  " : t.result()->Skipped() ? " SKIPPED  " : "       OK ";
    if (t.result()->Skipped())
      for (int i = 0; i < t.result()->total_part_count(); ++i)
        std::printf("%s\n", t.result()->GetTestPartResult(i).message());
    std::printf("[%s] %s.%s (%lld ms)\n", tag, t.test_suite_name(), t.name(),
                static_cast<long long>(t.result()->elapsed_time()));
  }
  void OnTestProgramEnd(const ::testing::UnitTest& u) override {
    std::printf("[==========] %d tests from %d test suites ran. (rank %d)\n", u.test_to_run_count(),
                u.test_suite_to_run_count(), rank_);
    std::fflush(stdout);
  }

 private:
  int rank_;
};

/// Installs RankFailurePrinter on ranks other than 0 (call after InitGoogleTest).
inline void quiet_followers(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));
}

/// GPU registrations (one GPU per rank): whether this node has `gpus` >= its rank count. When
/// not, rank 0 prints the line CTest's SKIP_REGULAR_EXPRESSION matches ("no GPU visible" or
/// "needs at least N GPUs") naming `suite`, and the caller returns 0 (collective: every rank
/// calls it).
inline bool gpus_for_every_rank(int rank, int gpus, const char* suite) {
  int local = 1;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  if (gpus >= local) return true;
  if (rank == 0) {
    if (gpus == 0) std::printf("no GPU visible: %s on the CUDA engine is skipped\n", suite);
    else std::printf("needs at least %d GPUs (one per rank); %d visible: %s skipped\n", local, gpus, suite);
  }
  return false;
}

/// RUN_ALL_TESTS on every rank; the worst exit code over all ranks.
inline int run_all_tests_on_every_rank(int rank) {
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != 0 && rc == 0) std::fprintf(stderr, "FAILED on another rank (see the [rank r] lines)\n");
  return worst;
}

}  // namespace shardtopk::test
