// bench_order: queries over the total order against a plain top-k on one generated corpus (rows
// made on the device by the CUDA engine, or on the host by the CPU engine), at batch 1, host to
// host on rank 0 (wall clock around admit + search, or around rank). Kinds:
//   topk   a top-k search without bounds or stats: the reference of every ratio
//   range  every row at or ahead of the query's own k-th score (min_score; l2: max_distance =
//          its k-th distance), limit k, with the exact total
//   count  that range's total alone (count_only: limit 1, the total read from the stats)
//   page   the k rows after the query's k-th result (search_after its (score, id))
//   rank   the rank of the id at position k/2 of the query's top-k
//   walk   --pages consecutive pages of k from the top, each after the previous page's last row,
//          timed as a whole: walk time / (pages x the page p50) is 1 when a page costs the same
//          at every depth; also the p50 of the last 10 pages over the p50 of the first 10
// Per kind: p50 and p99 (µs) over -n queries of a generated pool, p50 over topk's p50, and
// #wrong, counted outside the timed loops for --check-queries queries: the top-k against
// float64 scores (pipeline.hpp check_samples, count mode); the range equal to the top-k (ids and
// score bits) with a total >= k that the count repeats; the page equal to positions k .. 2k-1 of
// a top-2k; the rank of the top-k's position j equal to j + 1, with its score bits; every walk
// without an id twice, each row strictly after the one before it, and the rank of its last row
// equal to pages x k (when the corpus has that many rows). An engine that refuses a kind at
// admission has it reported as refused. JSON lines per kind (-J), then a table; the exit status
// is 1 when anything is wrong or refused.
//
//   mpirun -np 1 build/bench/bench_order -N 10M -d 768 -k 100 -t float16 --pages 100 -J order.jsonl
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/stats.hpp"
#include "harness.hpp"
#include "pipeline.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/search_batch.hpp"

namespace shardtopk::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Flags {
  std::string rows = "10M";
  std::int64_t dim = 768;
  int k = 100;
  std::string dtype = "float16";
  std::string metric = "inner_product";
  int iters = 20, warmup = 5, pages = 100, walks = 3, check = 1, check_queries = 4;
  std::uint64_t seed = 1;
  std::string json_path, git, tag;
  std::vector<std::string> sets;
  int corrupt = 0;  // tests only: damage one expected value so that the check must fail
};

// Returns false when the program should exit now (help, or a parse error) with *exit_code.
bool parse_flags(int argc, char** argv, int rank, Flags* f, int* exit_code) {
  CLI::App app{"shardtopk order-query benchmark: ranges, counts, pages, ranks and a page walk against a plain top-k",
               "bench_order"};
  app.add_option("-N,--rows", f->rows, "corpus rows (10M, 200k)")->capture_default_str();
  app.add_option("-d,--dim", f->dim, "dimension")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-k,--k", f->k, "K: results per query, page size and range limit")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-t,--dtype", f->dtype, "storage: float32, float16, bfloat16")->capture_default_str();
  app.add_option("-m,--metric", f->metric, "inner_product | cosine | l2")->capture_default_str();
  app.add_option("-n,--iters", f->iters, "timed calls per kind")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup", f->warmup, "warm-up calls per kind")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--pages", f->pages, "pages of k in a walk")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--walks", f->walks, "walks timed (each on its own query)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-c,--check", f->check, "check answers (0|1); a wrong answer exits non-zero")
      ->capture_default_str()
      ->check(CLI::Range(0, 1));
  app.add_option("--check-queries", f->check_queries, "queries checked per kind")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", f->seed, "corpus seed (queries: seed + 1)")->capture_default_str();
  app.add_option("-J,--json", f->json_path, "append one JSON record per kind to FILE ('-': stdout)");
  app.add_option("--set", f->sets, "config override key=value (engine.backend, engine.threads, ...)");
  app.add_option("--git", f->git, "the commit to record");
  app.add_option("--tag", f->tag, "free text copied into every record");
  app.add_option("--corrupt", f->corrupt,
                 "tests only: 1 moves the expected first score of a page by one ulp (the check must count it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    return false;
  }
  return true;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A score with the digits that tell float32 values apart (a one-ulp difference shows).
std::string score_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// One collective call's answer on rank 0 (followers: zeros). ids and scores hold k_max slots, of
// which `count` are real; scores in reported units.
struct Answer {
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
  std::int32_t count = 0;
  QueryStats stats;
  std::int64_t rank = 0;  // rank(): the id's rank and score
  float rank_score = 0;
};

// The collective calls of the benchmark: rank 0 admits and asks with its answer buffers, sized
// once; the other ranks make the same calls with an empty batch and nullptrs, in lock step.
class OrderClient {
 public:
  OrderClient(ShardedIndex& index, Communicator& host, const std::vector<float>& pool, std::int64_t dim, int k_max)
      : index_(index), host_(host), pool_(pool), dim_(dim), leader_(host.rank() == 0) {
    a_.ids.assign(static_cast<std::size_t>(k_max), 0);
    a_.scores.assign(static_cast<std::size_t>(k_max), 0.0f);
  }

  // Collective: query q of the pool for k results within `bounds` (nullptr: a plain top-k, no
  // stats). Returns rank 0's time of admit + search (µs; followers 0); the answer in answer().
  double search(int q, int k, const QueryBounds* bounds, bool stats) {
    if (!leader_) {
      index_.search(SearchBatch{}, nullptr, nullptr);
      return 0;
    }
    const auto t0 = Clock::now();
    const float* query = query_of(q);
    const SearchBatch batch =
        bounds ? index_.admit(query, 1, k, nullptr, bounds, stats) : index_.admit(query, 1, k);
    index_.search(batch, a_.ids.data(), a_.scores.data(), &a_.count, &a_.stats);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }

  // Collective: the rank and score of row `id` for query q; time as search().
  double rank(int q, std::int64_t id) {
    if (!leader_) {
      index_.rank(nullptr, nullptr, 0, nullptr, nullptr, nullptr);
      return 0;
    }
    const auto t0 = Clock::now();
    index_.rank(query_of(q), &id, 1, nullptr, &a_.rank, &a_.rank_score);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }

  // Whether the engine takes query q with `bounds`: rank 0 admits it outside any collective.
  // Returns "" on every rank when it does, else the refusal (rank 0's message; the others: a
  // placeholder).
  std::string refusal(int q, int k, const QueryBounds& bounds, bool stats) {
    std::string why;
    if (leader_) {
      try {
        (void)index_.admit(query_of(q), 1, k, nullptr, &bounds, stats);
      } catch (const CommError&) {
        throw;
      } catch (const Error& e) {
        why = e.what();
      }
    }
    return agreed(why);
  }

  // Collective: whether the engine ranks row `id` for query q (one rank() call; a refusal is
  // told to the followers too). Returns as refusal().
  std::string rank_refusal(int q, std::int64_t id) {
    std::string why;
    try {
      rank(q, id);
    } catch (const CommError&) {
      throw;
    } catch (const Error& e) {
      why = e.what();
    }
    return agreed(why);
  }

  const Answer& answer() const { return a_; }

 private:
  const float* query_of(int q) const { return pool_.data() + static_cast<std::size_t>(q) * dim_; }
  // Rank 0's verdict on every rank ("" : taken).
  std::string agreed(const std::string& why) const {
    int refused = leader_ && !why.empty() ? 1 : 0;
    host_.broadcast(&refused, sizeof refused, 0);
    return !refused ? std::string() : leader_ ? why : std::string("refused on rank 0");
  }

  ShardedIndex& index_;
  Communicator& host_;
  const std::vector<float>& pool_;
  std::int64_t dim_;
  bool leader_;
  Answer a_;
};

// A query's top-k as first answered (rank 0; followers: zeros): the bounds of the other kinds.
struct TopK {
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
};

// One kind's measurement and checks.
struct Kind {
  std::string name;
  std::function<double(int)> call;  // one timed call for query q of the pool (µs on rank 0)
  std::vector<double> lat_us;  // timed calls (walk: whole walks)
  std::string refused;         // the engine's refusal ("": measured)
  long long wrong = 0;
  int checked = 0;  // queries (walk: walks) checked
  std::string first_problem;
  // walk only: per-page times of the first and the last pages of every walk
  std::vector<double> first_pages_us, last_pages_us;
  std::vector<double> all_pages_us;  // walk only: every page of every walk

  void fail(const std::string& what) {
    ++wrong;
    if (first_problem.empty()) first_problem = what;
  }
};

// Everything the kinds and the checks share.
struct Setup {
  int k = 0, pages = 0, corrupt = 0;
  std::int64_t rows = 0;
  bool l2 = false;
  std::vector<TopK> top;  // [pool]

  // The order rule on reported scores: a is ahead of b (l2: a smaller distance first).
  bool ahead(float sa, std::int64_t ia, float sb, std::int64_t ib) const {
    return l2 ? better(-sa, ia, -sb, ib) : better(sa, ia, sb, ib);
  }
  QueryBounds range(int q) const {
    QueryBounds b;
    b.has_bound = true;
    b.bound = top[static_cast<std::size_t>(q)].scores[static_cast<std::size_t>(k - 1)];
    return b;
  }
  QueryBounds after_kth(int q) const {
    const TopK& t = top[static_cast<std::size_t>(q)];
    QueryBounds b;
    b.has_after = true;
    b.after_score = t.scores[static_cast<std::size_t>(k - 1)];
    b.after_id = t.ids[static_cast<std::size_t>(k - 1)];
    return b;
  }
  std::int64_t middle_id(int q) const { return top[static_cast<std::size_t>(q)].ids[static_cast<std::size_t>(k / 2)]; }
};

std::string at(const std::string& kind, int q) { return kind + " query " + std::to_string(q) + ": "; }

// Expects positions [0, n) of `got` to equal `want_ids` / `want_scores` from `from` on, ids and
// score bits; one wrong per differing position.
void expect_rows(Kind& kind, const std::string& where, const Answer& got, const std::vector<std::int64_t>& want_ids,
                 const std::vector<float>& want_scores, std::size_t from, std::int32_t n) {
  for (std::int32_t j = 0; j < n; ++j) {
    const std::size_t w = from + static_cast<std::size_t>(j);
    if (got.ids[static_cast<std::size_t>(j)] != want_ids[w] || !same_bits(got.scores[static_cast<std::size_t>(j)], want_scores[w]))
      kind.fail(where + "position " + std::to_string(w) + " is (" + score_text(got.scores[static_cast<std::size_t>(j)]) +
                ", " + std::to_string(got.ids[static_cast<std::size_t>(j)]) + "), expected (" + score_text(want_scores[w]) +
                ", " + std::to_string(want_ids[w]) + ")");
  }
}

// Range and count of query q (collective; rank 0 judges).
void check_range_and_count(OrderClient& c, const Setup& s, int q, bool leader, Kind* range, Kind* count) {
  const QueryBounds b = s.range(q);
  const TopK& t = s.top[static_cast<std::size_t>(q)];
  std::int64_t range_total = -1;
  if (range) {
    c.search(q, s.k, &b, true);
    if (leader) {
      const Answer& a = c.answer();
      const std::string where = at("range", q);
      ++range->checked;
      range_total = a.stats.total;
      if (a.count != s.k) range->fail(where + std::to_string(a.count) + " rows, expected " + std::to_string(s.k));
      expect_rows(*range, where, a, t.ids, t.scores, 0, std::min(a.count, s.k));
      if (a.stats.total < s.k) range->fail(where + "total " + std::to_string(a.stats.total) + " < k");
    }
  }
  if (count) {
    c.search(q, 1, &b, true);
    if (leader) {
      const Answer& a = c.answer();
      const std::string where = at("count", q);
      ++count->checked;
      if (a.stats.total < s.k) count->fail(where + "total " + std::to_string(a.stats.total) + " < k");
      if (range && a.stats.total != range_total)
        count->fail(where + "total " + std::to_string(a.stats.total) + " differs from the range's " +
                    std::to_string(range_total));
    }
  }
}

// The page after the k-th row against positions k .. 2k-1 of a top-2k (collective).
void check_page(OrderClient& c, const Setup& s, int q, bool leader, Kind& page) {
  const int k2 = static_cast<int>(std::min<std::int64_t>(2 * s.k, s.rows));
  c.search(q, k2, nullptr, false);
  const Answer& a = c.answer();
  std::vector<std::int64_t> ids(a.ids.begin(), a.ids.begin() + k2);
  std::vector<float> scores(a.scores.begin(), a.scores.begin() + k2);
  if (s.corrupt == 1 && q == 0 && k2 > s.k)  // test hook: the first row's expected score one ulp off
    scores[static_cast<std::size_t>(s.k)] =
        std::nextafter(scores[static_cast<std::size_t>(s.k)], std::numeric_limits<float>::infinity());
  const QueryBounds b = s.after_kth(q);
  c.search(q, s.k, &b, false);
  if (!leader) return;
  const std::string where = at("page", q);
  ++page.checked;
  const std::int32_t want = k2 - s.k;
  if (a.count != want) page.fail(where + std::to_string(a.count) + " rows, expected " + std::to_string(want));
  expect_rows(page, where, a, ids, scores, static_cast<std::size_t>(s.k), std::min(a.count, want));
}

// Ranks of the top-k's positions 0, k/2 and k-1 (collective).
void check_ranks(OrderClient& c, const Setup& s, int q, bool leader, Kind& rank) {
  std::vector<int> positions{0, s.k / 2, s.k - 1};
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  const TopK& t = s.top[static_cast<std::size_t>(q)];
  if (leader) ++rank.checked;
  for (int j : positions) {
    c.rank(q, t.ids[static_cast<std::size_t>(j)]);
    if (!leader) continue;
    const Answer& a = c.answer();
    const std::string where = at("rank", q) + "id " + std::to_string(t.ids[static_cast<std::size_t>(j)]) + " ";
    if (a.rank != j + 1) rank.fail(where + "has rank " + std::to_string(a.rank) + ", expected " + std::to_string(j + 1));
    if (!same_bits(a.rank_score, t.scores[static_cast<std::size_t>(j)]))
      rank.fail(where + "has score " + score_text(a.rank_score) + ", expected " +
                score_text(t.scores[static_cast<std::size_t>(j)]));
  }
}

// One timed walk of query q: s.pages pages of k, each after the previous page's last row; the
// rows walked (rank 0) come back in ids / scores. Returns rank 0's whole time (µs).
double walk_once(OrderClient& c, const Setup& s, int q, std::vector<double>* page_us, std::vector<std::int64_t>* ids,
                 std::vector<float>* scores) {
  ids->clear();
  scores->clear();
  ids->reserve(static_cast<std::size_t>(s.pages) * s.k);
  scores->reserve(ids->capacity());
  page_us->assign(static_cast<std::size_t>(s.pages), 0.0);
  QueryBounds b;
  const auto t0 = Clock::now();
  for (int p = 0; p < s.pages; ++p) {
    // past the last row a page is empty and the next one asks after the same row again: every
    // rank makes s.pages calls whatever the corpus size
    (*page_us)[static_cast<std::size_t>(p)] = c.search(q, s.k, p == 0 ? nullptr : &b, false);
    const Answer& a = c.answer();
    if (a.count == 0) continue;
    ids->insert(ids->end(), a.ids.begin(), a.ids.begin() + a.count);
    scores->insert(scores->end(), a.scores.begin(), a.scores.begin() + a.count);
    b.has_after = true;
    b.after_score = scores->back();
    b.after_id = ids->back();
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// A walk's rows: as many as the corpus allows, no id twice, each strictly after the one before;
// the last one's rank (collective, when `rank_ok`) is pages x k.
void check_walk(OrderClient& c, const Setup& s, int q, bool leader, bool rank_ok, const std::vector<std::int64_t>& ids,
                const std::vector<float>& scores, Kind& walk) {
  const std::int64_t want = std::min<std::int64_t>(static_cast<std::int64_t>(s.pages) * s.k, s.rows);
  const bool full = static_cast<std::int64_t>(s.pages) * s.k <= s.rows;
  if (rank_ok && full) c.rank(q, ids.empty() ? 0 : ids.back());
  if (!leader) return;
  const std::string where = at("walk", q);
  ++walk.checked;
  if (static_cast<std::int64_t>(ids.size()) != want)
    walk.fail(where + std::to_string(ids.size()) + " rows walked, expected " + std::to_string(want));
  std::vector<std::int64_t> sorted(ids);
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) walk.fail(where + "id " + std::to_string(*dup) + " returned twice");
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (!s.ahead(scores[i - 1], ids[i - 1], scores[i], ids[i]))
      walk.fail(where + "row " + std::to_string(i) + " (" + score_text(scores[i]) + ", " + std::to_string(ids[i]) +
                ") is not after row " + std::to_string(i - 1) + " (" + score_text(scores[i - 1]) + ", " +
                std::to_string(ids[i - 1]) + ")");
  if (rank_ok && full && !ids.empty()) {
    const Answer& a = c.answer();
    if (a.rank != want) walk.fail(where + "the last row's rank is " + std::to_string(a.rank) + ", expected " + std::to_string(want));
    if (!same_bits(a.rank_score, scores.back()))
      walk.fail(where + "the last row's rank score " + score_text(a.rank_score) + " differs from its page's " +
                score_text(scores.back()));
  }
}

int run(MpiSession& mpi, int argc, char** argv) {
  const int rank = mpi.rank(), world = mpi.world_size();
  Flags f;
  int exit_code = 0;
  if (!parse_flags(argc, argv, rank, &f, &exit_code)) return exit_code;
  init_logging(rank, world);
  if (!log_level_from_environment()) spdlog::set_level(spdlog::level::warn);
  const bool leader = rank == 0;

  Config cfg;
  for (const auto& s : f.sets) apply_override(cfg, s);
  cfg.search.k_max = std::max(cfg.search.k_max, 2 * f.k);  // the page check's top-2k
  cfg.search.metric = parse_metric(f.metric);
  cfg.engine.dtype = parse_dtype(f.dtype);
  CorpusSpec spec;
  spec.seed = f.seed;
  spec.rows = parse_count(f.rows);
  spec.dim = f.dim;
  spec.metric = *cfg.search.metric;
  spec.dtype = cfg.engine.dtype;
  SHARDTOPK_EXPECTS(spec.rows >= f.k, "-k ", f.k, " is more than the corpus's ", spec.rows, " rows");
  Options opt;  // BenchIndex's options: rows generated where the engine runs
  const auto t_build = Clock::now();
  BenchIndex idx(spec, cfg, opt);
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  Communicator& host = idx.host();

  // Query pool (seed + 1) on every rank; timed call i (warm-up and timed alike) asks query i mod pool.
  const int pool = std::max({f.iters, f.warmup, f.walks, f.check ? f.check_queries : 0, 1});
  std::vector<float> queries(static_cast<std::size_t>(pool) * spec.dim);
  generate_rows(f.seed + 1, 0, pool, spec.dim, queries.data(), 0);
  OrderClient client(idx.index(), host, queries, spec.dim, 2 * f.k);

  Setup s;
  s.k = f.k;
  s.pages = f.pages;
  s.corrupt = f.corrupt;
  s.rows = spec.rows;
  s.l2 = spec.metric == Metric::kL2;
  for (int q = 0; q < pool; ++q) {
    client.search(q, f.k, nullptr, false);
    const Answer& a = client.answer();
    s.top.push_back(TopK{{a.ids.begin(), a.ids.begin() + f.k}, {a.scores.begin(), a.scores.begin() + f.k}});
  }

  // The kinds, each with its call for query q (bounds made before the clock starts); a kind the
  // engine refuses at admission is reported as refused and not timed.
  std::vector<Kind> kinds(6);
  Kind &topk = kinds[0], &range = kinds[1], &count = kinds[2], &page = kinds[3], &rnk = kinds[4], &walk = kinds[5];
  topk.name = "topk";
  topk.call = [&](int q) { return client.search(q, f.k, nullptr, false); };
  range.name = "range";
  range.call = [&](int q) {
    const QueryBounds b = s.range(q);
    return client.search(q, f.k, &b, true);
  };
  count.name = "count";
  count.call = [&](int q) {
    const QueryBounds b = s.range(q);
    return client.search(q, 1, &b, true);
  };
  page.name = "page";
  page.call = [&](int q) {
    const QueryBounds b = s.after_kth(q);
    return client.search(q, f.k, &b, false);
  };
  rnk.name = "rank";
  rnk.call = [&](int q) { return client.rank(q, s.middle_id(q)); };
  walk.name = "walk";  // timed below, page after page
  range.refused = client.refusal(0, f.k, s.range(0), true);
  count.refused = client.refusal(0, 1, s.range(0), true);
  page.refused = client.refusal(0, f.k, s.after_kth(0), false);
  rnk.refused = client.rank_refusal(0, s.middle_id(0));
  if (!page.refused.empty()) walk.refused = "pages: " + page.refused;
  for (Kind& kind : kinds) {
    if (!kind.call || !kind.refused.empty()) continue;
    for (int i = 0; i < f.warmup; ++i) kind.call(i % pool);
    host.barrier();
    for (int i = 0; i < f.iters; ++i) kind.lat_us.push_back(kind.call(i % pool));
    host.barrier();
  }

  // Walks (the page kind warmed them up): whole times, per-page times of the first and last pages.
  const int edge = std::max(1, std::min(10, f.pages / 2));
  std::vector<std::vector<std::int64_t>> walk_ids(static_cast<std::size_t>(f.walks));
  std::vector<std::vector<float>> walk_scores(static_cast<std::size_t>(f.walks));
  if (walk.refused.empty()) {
    std::vector<double> page_us;
    for (int w = 0; w < f.walks; ++w) {
      walk.lat_us.push_back(walk_once(client, s, w % pool, &page_us, &walk_ids[static_cast<std::size_t>(w)],
                                      &walk_scores[static_cast<std::size_t>(w)]));
      walk.first_pages_us.insert(walk.first_pages_us.end(), page_us.begin(), page_us.begin() + edge);
      walk.last_pages_us.insert(walk.last_pages_us.end(), page_us.end() - edge, page_us.end());
      walk.all_pages_us.insert(walk.all_pages_us.end(), page_us.begin(), page_us.end());
    }
    host.barrier();
  }

  // Checks, outside the timed loops: the top-k against float64 scores, then each kind's rules.
  std::vector<Sample> samples;
  CheckInfo info;
  info.mode = "none";
  double check_s = 0;
  if (f.check) {
    const auto tc = Clock::now();
    for (int q = 0; leader && q < f.check_queries; ++q) {
      Sample smp;
      smp.entry = 0;
      smp.query = q;
      smp.k = f.k;
      smp.ids = s.top[static_cast<std::size_t>(q)].ids;
      smp.scores = s.top[static_cast<std::size_t>(q)].scores;
      samples.push_back(std::move(smp));
    }
    const std::vector<CheckResult> oracle =
        check_samples(idx.corpus(), host, idx.my_rows(), queries, samples, 1, CheckMode::kCount,
                      resolve_threads(cfg, host.local_size()), 0, &info);
    if (leader) {
      topk.wrong = oracle[0].wrong;
      topk.checked = oracle[0].queries;
      topk.first_problem = oracle[0].first_problem;
    }
    for (int q = 0; q < f.check_queries; ++q) {
      check_range_and_count(client, s, q, leader, range.refused.empty() ? &range : nullptr,
                            count.refused.empty() ? &count : nullptr);
      if (page.refused.empty()) check_page(client, s, q, leader, page);
      if (rnk.refused.empty()) check_ranks(client, s, q, leader, rnk);
    }
    for (int w = 0; walk.refused.empty() && w < f.walks; ++w)
      check_walk(client, s, w % pool, leader, rnk.refused.empty(), walk_ids[static_cast<std::size_t>(w)],
                 walk_scores[static_cast<std::size_t>(w)], walk);
    check_s = std::chrono::duration<double>(Clock::now() - tc).count();
  }

  long long total_wrong = 0, refused = 0;
  if (leader) {
    const Table table({{"kind", "", 6},
                       {"p50", "(us)", 10},
                       {"p99", "(us)", 10},
                       {"time", "(/topk)", 7},
                       {"walk", "(/P.page)", 9},
                       {"last10", "(/first)", 8},
                       {"checked", "", 7},
                       {"#wrong", "", 6}});
    std::cout << "# bench_order: " << world << " rank(s), engine " << idx.engine_name() << " (" << idx.device_name()
              << "), comm " << idx.comm_name() << ", " << spec.rows << " x " << spec.dim << " " << f.dtype << " "
              << f.metric << ", K " << f.k << ", batch 1, rows generated on the " << idx.generated_on() << ", build "
              << fmt_num(build_s, 1) << " s, git " << git_commit(f.git) << "\n"
              << "# iters " << f.iters << ", warm-up " << f.warmup << ", walks " << f.walks << " of " << f.pages
              << " pages (first/last " << edge << " pages compared), check " << f.check << " (" << f.check_queries
              << " queries per kind)\n"
              << table.header();
    const double topk50 = percentile(topk.lat_us, 50), page50 = percentile(page.lat_us, 50);
    for (const Kind& kind : kinds) {
      const bool is_walk = &kind == &walk;
      const double p50 = percentile(kind.lat_us, 50), p99 = percentile(kind.lat_us, 99);
      const double ratio = is_walk ? NAN : p50 / topk50;
      const double walk_ratio = is_walk ? p50 / (f.pages * page50) : NAN;
      const double first50 = percentile(kind.first_pages_us, 50), last50 = percentile(kind.last_pages_us, 50);
      json r;
      r["bench"] = "bench_order";
      r["ranks"] = world;
      r["rows_total"] = spec.rows;
      r["dim"] = spec.dim;
      r["dtype"] = f.dtype;
      r["metric"] = f.metric;
      r["k"] = f.k;
      r["batch"] = 1;
      r["kind"] = kind.name;
      r["iters"] = is_walk ? f.walks : f.iters;
      r["warmup"] = f.warmup;
      if (is_walk) {
        r["pages"] = f.pages;
        r["walk_ratio_page_p50"] = walk_ratio;  // walk time / (pages x page p50)
        r["first_pages_p50_ms"] = first50 / 1e3;
        r["last_pages_p50_ms"] = last50 / 1e3;
        r["edge_pages"] = edge;
        // the walk's pages one by one: their p50, p99 and largest (a slow search inside a walk
        // shows here, a page that costs more with depth in last/first)
        r["walk_pages_p50_ms"] = percentile(kind.all_pages_us, 50) / 1e3;
        r["walk_pages_p99_ms"] = percentile(kind.all_pages_us, 99) / 1e3;
        r["walk_pages_max_ms"] =
            kind.all_pages_us.empty() ? NAN : *std::max_element(kind.all_pages_us.begin(), kind.all_pages_us.end()) / 1e3;
      }
      r["p50_ms"] = p50 / 1e3;
      r["p99_ms"] = p99 / 1e3;
      if (!is_walk) r["time_ratio_p50"] = ratio;
      if (!kind.refused.empty()) r["refused"] = kind.refused;
      r["check"] = f.check;
      r["check_mode"] = info.mode;
      r["checked_queries"] = kind.checked;
      r["wrong"] = kind.wrong;
      if (!kind.first_problem.empty()) r["first_problem"] = kind.first_problem;
      r["check_s"] = check_s;
      r["engine"] = idx.engine_name();
      r["device"] = idx.device_name();
      r["rows_from"] = "generated:" + idx.generated_on();
      r["seed"] = f.seed;
      r["git"] = git_commit(f.git);
      r["host"] = host_name();
      r["time"] = utc_now();
      if (!f.tag.empty()) r["tag"] = f.tag;
      write_json_line(f.json_path, r);
      std::cout << table.line({kind.name, fmt_num(p50), fmt_num(p99), fmt_num(ratio, 3), fmt_num(walk_ratio, 3),
                               fmt_num(last50 / first50, 3), fmt_int(kind.checked), fmt_int(kind.wrong)});
      total_wrong += kind.wrong;
      if (kind.wrong > 0) std::cout << "# WRONG: " << kind.name << ": " << kind.first_problem << "\n";
      if (!kind.refused.empty()) {
        ++refused;
        std::cout << "# REFUSED: " << kind.name << ": " << kind.refused << "\n";
      }
    }
    if (f.check)
      std::cout << "# checked in " << fmt_num(check_s, 2) << " s (top-k: " << info.mode << " against float64)\n";
    std::cout << std::flush;
  }
  long long status[2] = {total_wrong, refused};
  host.broadcast(status, sizeof status, 0);
  if (leader)
    std::cout << "# " << (status[0] || status[1] ? "FAILED" : "OK") << ": #wrong total " << status[0] << ", kinds refused "
              << status[1] << "\n";
  return status[0] || status[1] ? 1 : 0;
}

}  // namespace
}  // namespace shardtopk::bench

int main(int argc, char** argv) {
  return shardtopk::bench::run_on_ranks(argc, argv, "bench_order", &shardtopk::bench::run);
}
