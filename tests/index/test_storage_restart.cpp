// Restarting an updatable index under MPI (one binary, registered in CTest for P = 1, 2, 4): the
// capacity a storage directory was started with is kept across restarts (after deletes and a
// snapshot of fewer rows, after storage.capacity_rows is set once and removed again, and after a
// start that failed), and a start-up waits, with every rank, for another process's lock on the directory for longer than
// comm.timeout_s, and a long log replays (merged into large groups) to the answers it gave.
// Rows are found by searching their own vectors (l2: distance 0).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpi_gtest.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

int g_rank = 0, g_world = 1;
std::string g_dir;

constexpr std::int64_t kN = 40, kDim = 8;
constexpr int kK = 3;

void on_root(const std::function<void()>& f) {
  if (g_rank == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 0 set-up failed: " << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

class StorageRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    stem_ = g_dir + "/" + info->name();
    rows_ = test::random_floats(kN * kDim, 3);
    on_root([&] {
      H5Writer w(stem_ + ".h5");
      w.write_f32("train", rows_.data(), kN, kDim);
    });
    cfg_.source = "test";
    cfg_.corpus.path = stem_ + ".h5";
    cfg_.search.metric = Metric::kL2;
    cfg_.search.k_max = 8;
    cfg_.search.batch_max = 4;
    cfg_.engine.backend = EngineBackend::kCpu;
    cfg_.engine.threads = 1;
    cfg_.comm.backend = CommBackend::kMpi;
    cfg_.comm.timeout_s = 60;
    cfg_.storage.dir = stem_ + ".store";
  }

  /// Whether row `id` of the corpus is live: its own vector finds it first at distance 0.
  bool live(ShardedIndex& idx, std::int64_t id) {
    std::vector<std::int64_t> ids(kK);
    std::vector<float> scores(kK);
    idx.search(g_rank == 0 ? rows_.data() + id * kDim : nullptr, 1, kK, g_rank == 0 ? ids.data() : nullptr,
               g_rank == 0 ? scores.data() : nullptr);
    std::int64_t hit = ids[0] == id && scores[0] == 0.0f ? 1 : 0;
    MPI_Bcast(&hit, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return hit != 0;
  }

  std::string stem_;
  std::vector<float> rows_;
  Config cfg_;
};

// With storage.capacity_rows unset the slots are derived from the rows at the first start and
// recorded in the directory: a restart after deletes and a snapshot of fewer rows keeps them, and
// a capacity set once is kept after the key is removed again.
TEST_F(StorageRestart, TheCapacityADirectoryWasStartedWithIsKept) {
  std::int64_t first = 0;
  {
    auto idx = load_index(cfg_, false);
    first = idx->update_stats().capacity_rows;
    EXPECT_EQ(first, total_capacity_rows(cfg_, kN, g_world));
    std::vector<std::int64_t> gone;
    for (std::int64_t id = 0; id < 30; ++id) gone.push_back(id);
    idx->remove(gone.data(), static_cast<std::int64_t>(gone.size()));
    idx->snapshot();  // 10 rows: derived afresh, every rank's capacity would shrink
  }
  {
    auto idx = load_index(cfg_, false);
    EXPECT_EQ(idx->update_stats().capacity_rows, first) << "a restart after deletes changed the capacity";
    EXPECT_FALSE(live(*idx, 3));
    EXPECT_TRUE(live(*idx, 33));
  }
  Config set = cfg_;
  set.storage.capacity_rows = 2000;
  {
    auto idx = load_index(set, false);
    EXPECT_EQ(idx->update_stats().capacity_rows, 2000 * g_world);
  }
  {
    auto idx = load_index(cfg_, false);
    EXPECT_EQ(idx->update_stats().capacity_rows, 2000 * g_world) << "the capacity set last was not kept";
    EXPECT_TRUE(live(*idx, 39));
  }
  // Another rank count splits the recorded slots over its ranks as rows are split (the shares
  // add up to them), never below a shard.
  EXPECT_EQ(rank_capacity_rows(cfg_, 10, 4, 12500, 3), 3125);
  EXPECT_EQ(rank_capacity_rows(cfg_, 10, 3, 12500, 0), 4167);
  EXPECT_EQ(rank_capacity_rows(cfg_, 10, 3, 12500, 2), 4166);
  EXPECT_EQ(total_capacity_rows(cfg_, 30, 3, 12500), 12500);
  EXPECT_EQ(rank_capacity_rows(cfg_, 5000, 4, 12500, 1), 5000 + 1250);  // the recorded share is too small
}

// A start that fails while replaying the log (storage.capacity_rows too small for the rows the log
// adds) records nothing: the next start without the key gets the capacity the directory had.
TEST_F(StorageRestart, AStartThatFailsKeepsTheRecordedCapacity) {
  std::int64_t first = 0;
  {
    auto idx = load_index(cfg_, false);
    first = idx->update_stats().capacity_rows;
    std::vector<std::int64_t> ids{kN, kN + 1, kN + 2, kN + 3, kN + 4};
    std::vector<float> rows(ids.size() * kDim);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = rows_[i] + 1.0f;
    UpsertRows u;
    u.rows = static_cast<std::int64_t>(ids.size());
    u.ids = ids.data();
    u.vectors = rows.data();
    idx->upsert(u);
  }
  Config small = cfg_;
  small.storage.capacity_rows = kN / g_world;  // every slot taken by the base rows
  std::string error;
  try {
    auto idx = load_index(small, false);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("cannot be applied"), std::string::npos) << "the start did not fail as planned: " << error;
  auto idx = load_index(cfg_, false);
  EXPECT_EQ(idx->update_stats().capacity_rows, first) << "the failed start recorded its capacity";
  EXPECT_TRUE(live(*idx, 2));
}

// While another process holds the directory (the orphaned ranks of a killed job), rank 0 waits
// for it up to storage.lock_wait_s, longer than comm.timeout_s, and the other ranks wait with it.
TEST_F(StorageRestart, AStartUpWaitsForTheDirectorysHolderWithEveryRank) {
  cfg_.comm.timeout_s = 3;
  cfg_.storage.lock_wait_s = 120;
  int release = -1;
  pid_t holder = -1;
  on_root([&] {
    std::filesystem::create_directories(cfg_.storage.dir);
    int ready[2], hold[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(hold), 0);
    holder = fork();
    if (holder == 0) {  // takes the lock the way a Storage does, holds it until told, exits
      const int fd = open((cfg_.storage.dir + "/LOCK").c_str(), O_RDWR | O_CREAT, 0644);
      char c = fd >= 0 && flock(fd, LOCK_EX) == 0 ? 1 : 0;
      if (write(ready[1], &c, 1) != 1 || read(hold[0], &c, 1) < 0) _exit(2);
      _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    ASSERT_EQ(c, 1);
    close(ready[0]);
    release = hold[1];
  });
  // Released after more than comm.timeout_s: the other ranks' collectives must have been kept
  // alive meanwhile (a set-up delay, not a timed assertion).
  std::thread releaser;
  if (g_rank == 0)
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::seconds(7));
      const char c = 1;
      (void)!write(release, &c, 1);
      close(release);
    });
  std::unique_ptr<ShardedIndex> idx;
  std::string error;
  try {
    idx = load_index(cfg_, false);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (g_rank == 0) {
    releaser.join();
    waitpid(holder, nullptr, 0);
  }
  ASSERT_TRUE(idx) << error;
  EXPECT_TRUE(live(*idx, 7));
}

// A long log in which the same ids are written over and over, deleted and written again, on
// every rank: the restart applies it in large merged groups, and answers bit for bit as the
// index did before (the same rows in the same slots).
TEST_F(StorageRestart, ALongLogRewritingTheSameIdsReplaysToTheSameAnswers) {
  // Queries: random ones, and the last vector written for each rewritten id (found at distance
  // 0 exactly when the id is live).
  const std::int64_t kRandom = 12, kIds = 12, kQueries = kRandom + kIds;
  std::vector<float> queries = test::random_floats(kQueries * kDim, 9);
  auto answers = [&](ShardedIndex& idx) {
    std::vector<std::int64_t> ids(kQueries * kK);
    std::vector<float> scores(kQueries * kK);
    for (std::int64_t q = 0; q < kQueries; ++q)
      idx.search(g_rank == 0 ? queries.data() + q * kDim : nullptr, 1, kK, g_rank == 0 ? ids.data() + q * kK : nullptr,
                 g_rank == 0 ? scores.data() + q * kK : nullptr);
    return std::make_pair(ids, scores);
  };
  std::pair<std::vector<std::int64_t>, std::vector<float>> before;
  {
    auto idx = load_index(cfg_, false);
    std::mt19937_64 rng(11);
    for (int r = 0; r < 400; ++r) {
      std::vector<std::int64_t> ids;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i) {
        const std::int64_t id = 100 + static_cast<std::int64_t>(rng() % kIds);  // a few ids, over and over
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      if (rng() % 4 == 0) {
        idx->remove(ids.data(), static_cast<std::int64_t>(ids.size()));
      } else {
        const std::vector<float> v = test::random_floats(ids.size() * kDim, 1000 + r);
        UpsertRows u;
        u.rows = static_cast<std::int64_t>(ids.size());
        u.ids = ids.data();
        u.vectors = v.data();
        idx->upsert(u);
        for (std::size_t i = 0; i < ids.size(); ++i)
          std::copy(v.begin() + static_cast<std::ptrdiff_t>(i * kDim), v.begin() + static_cast<std::ptrdiff_t>((i + 1) * kDim),
                    queries.begin() + (kRandom + ids[i] - 100) * kDim);
      }
    }
    before = answers(*idx);
  }
  // One step for the whole log, then steps of a few records and of one record: the same id
  // upserted, deleted and upserted again across step boundaries ends as applied one by one.
  for (long long step : {64ll << 20, 2000ll, 1ll}) {
    SCOPED_TRACE("storage.replay_step_bytes " + std::to_string(step));
    Config cfg = cfg_;
    cfg.storage.replay_step_bytes = step;
    auto idx = load_index(cfg, false);
    const auto after = answers(*idx);
    if (g_rank == 0) {
      EXPECT_EQ(after.first, before.first);
      EXPECT_EQ(after.second, before.second);
    }
  }
}

}  // namespace
}  // namespace shardtopk

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  shardtopk::g_rank = mpi.rank();
  shardtopk::g_world = mpi.world_size();
  shardtopk::test::quiet_followers(shardtopk::g_rank);
  char buf[4096] = {0};
  if (shardtopk::g_rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::snprintf(buf, sizeof buf, "%s/shardtopk-restart-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (buf[0] == '\0') MPI_Abort(MPI_COMM_WORLD, 1);
  shardtopk::g_dir = buf;
  const int worst = shardtopk::test::run_all_tests_on_every_rank(shardtopk::g_rank);
  if (shardtopk::g_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(shardtopk::g_dir, ec);
  }
  return worst;
}
