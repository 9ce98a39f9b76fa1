#include "pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "core/half.hpp"
#include "core/parallel.hpp"
#include "core/log.hpp"
#include "device_check.hpp"
#include "device_timer.hpp"
#include "index/index_impl.hpp"
#include "shardtopk/space.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk::bench {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

template <typename F>
void parallel_for(std::int64_t n, int threads, F&& f) {  // f(lo, hi, thread)
  parallel_ranges(n, range_parts(n, std::max(1, threads), 1), f);
}

}  // namespace

void stored_rows(const CorpusSpec& c, std::int64_t lo, std::int64_t n, float* out, int threads) {
  if (n <= 0) return;
  if (c.generated) {
    // Ids past c.rows: runs of their pool rows (CorpusSpec::added_pool).
    for (std::int64_t i = 0; i < n;) {
      const std::int64_t id = lo + i;
      std::int64_t src = id, run = n - i;
      if (id < c.rows) {
        run = std::min(run, c.rows - id);
      } else if (c.added_pool > 0) {
        const std::int64_t at = (id - c.rows) % c.added_pool;
        src = c.rows + at;
        run = std::min(run, c.added_pool - at);
      }
      generate_rows(c.seed, src, run, c.dim, out + i * c.dim, threads);
      i += run;
    }
  } else {
    SHARDTOPK_EXPECTS(lo + n <= c.rows, "rows [", lo, ", ", lo + n, ") past the corpus file's ", c.rows);
    HostMatrix m = read_rows(c.path, c.dataset, RowRange{lo, lo + n}, 65536, {}, "corpus row");
    std::memcpy(out, m.data.data(), sizeof(float) * static_cast<size_t>(n * c.dim));
  }
  if (c.metric == Metric::kCosine) {
    parallel_for(n, threads, [&](std::int64_t a, std::int64_t b, int) {
      for (std::int64_t i = a; i < b; ++i) normalize_rows(out + i * c.dim, 1, c.dim, lo + i, "corpus row");
    });
  }
  if (c.dtype != Dtype::kFloat32) {
    const bool f16 = c.dtype == Dtype::kFloat16;
    parallel_for(n * c.dim, threads, [&](std::int64_t a, std::int64_t b, int) {
      for (std::int64_t i = a; i < b; ++i)
        out[i] = f16 ? half::from_f16(half::to_f16(out[i])) : half::from_bf16(half::to_bf16(out[i]));
    });
  }
}

std::int64_t generated_attribute(const std::string& name, std::uint64_t seed, std::int64_t row, std::int64_t rows) {
  if (name == "clustered") return static_cast<std::int64_t>((static_cast<__int128>(row) * 1000) / std::max<std::int64_t>(rows, 1));
  if (name == "scattered")
    return static_cast<std::int64_t>(splitmix64(seed ^ 0xA77B1E5ull ^ (static_cast<std::uint64_t>(row) * 0x9E3779B97F4A7C15ull)) % 1000);
  throw Error("generated attribute '" + name + "' unknown (known: clustered, scattered)");
}

// ---------------------------------------------------------------- BenchIndex

BenchIndex::BenchIndex(const CorpusSpec& corpus, const Config& cfg_in, const Options& opt)
    : corpus_(corpus), opt_(opt) {
  Config cfg = cfg_in;
  if (!corpus.generated) {
    index_ = load_index(cfg, true);
    const IndexInfo info = index_->info();
    corpus_.rows = info.rows;
    corpus_.dim = info.dim;
    corpus_.metric = info.metric;
    mine_ = info.ingest.rows;
    schema_ = info.schema;
    device_name_ = engine_device_name(engine(), host().local_rank());
    generated_on_ = "file";
    return;
  }
  // A generated shard through the product's own ShardedIndex (build_index): the CUDA engine
  // makes its rows on the device; --host-rows 1 makes them on the host and uploads them.
  std::unique_ptr<Communicator> host_comm = make_mpi_communicator(cfg.comm.timeout_s);
  const int r = host_comm->rank(), world = host_comm->world_size();
  init_logging(r, world);
  mine_ = shard_rows(corpus_.rows, world, r);
  ShardInput in;
  in.rows = mine_.size();
  in.dim = corpus_.dim;
  in.generated = true;
  in.seed = corpus_.seed;
  in.first_row = mine_.lo;
  AttributeTable attributes;  // read by build_index (the engine keeps its own copy)
  bool ok = true;
  std::string msg;
  try {
    if (!corpus_.attributes.empty()) {
      const int threads = resolve_threads(cfg, host_comm->local_size());
      std::vector<AttributeColumn> cols;
      for (const std::string& name : corpus_.attributes) {
        AttributeColumn col{name, AttributeType::kInt64, std::vector<std::int64_t>(static_cast<size_t>(in.rows)), {}};
        parallel_for(in.rows, threads, [&](std::int64_t a, std::int64_t b, int) {
          for (std::int64_t i = a; i < b; ++i) col.ints[i] = generated_attribute(name, corpus_.seed, mine_.lo + i, corpus_.rows);
        });
        cols.push_back(std::move(col));
      }
      std::vector<std::int64_t> ids(static_cast<size_t>(in.rows));
      for (std::int64_t i = 0; i < in.rows; ++i) ids[i] = mine_.lo + i;
      attributes = AttributeTable(std::move(cols), std::move(ids), threads);
      in.attributes = &attributes;
    }
    const EngineBackend backend = choose_backend(cfg, *host_comm);
    generated_on_ = backend == EngineBackend::kCuda ? "device" : "host";
    if (backend == EngineBackend::kCuda && opt.host_rows) {
      const int threads = resolve_threads(cfg, host_comm->local_size());
      host_rows_.resize(static_cast<size_t>(in.rows * in.dim));
      generate_rows(corpus_.seed, mine_.lo, in.rows, in.dim, host_rows_.data(), threads);
      if (corpus_.metric == Metric::kCosine) normalize_rows(host_rows_.data(), in.rows, in.dim, mine_.lo, "corpus row");
      in.generated = false;
      in.data = host_rows_.data();
      generated_on_ = "host";
    }
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm->check(ok, msg);
  index_ = build_index(cfg, corpus_.metric, corpus_.rows, mine_, in, std::move(host_comm));
  schema_ = index_->info().schema;
  std::vector<float>().swap(host_rows_);
  device_name_ = engine_device_name(engine(), host().local_rank());
  // The instrumented path's own buffers, in the index's memory space (search_split).
  Space& sp = IndexAccess::protocol(*index_).space();
  const std::size_t bmax = static_cast<std::size_t>(cfg.search.batch_max);
  const std::size_t bk = bmax * static_cast<std::size_t>(cfg.search.k_max);
  split_queries_ = static_cast<float*>(sp.alloc(bmax * static_cast<std::size_t>(corpus_.dim) * sizeof(float)));
  split_local_ = static_cast<Candidate*>(sp.alloc(bk * sizeof(Candidate)));
  split_gathered_ = static_cast<Candidate*>(sp.alloc(bk * static_cast<std::size_t>(world) * sizeof(Candidate)));
  split_merged_ = static_cast<Candidate*>(sp.alloc(bk * sizeof(Candidate)));
  split_ids_ = static_cast<std::int64_t*>(sp.alloc_host(bk * sizeof(std::int64_t)));
  split_scores_ = static_cast<float*>(sp.alloc_host(bk * sizeof(float)));
}

BenchIndex::~BenchIndex() = default;

Communicator& BenchIndex::host() const { return IndexAccess::protocol(*index_).host(); }
Communicator& BenchIndex::data() const { return IndexAccess::protocol(*index_).data(); }
Engine& BenchIndex::engine() const { return IndexAccess::protocol(*index_).engine(); }
std::string BenchIndex::engine_name() const { return engine().info().name; }
std::string BenchIndex::comm_name() const { return data().name(); }

void BenchIndex::admit(const float* queries, int batch) {
  if (rank() == 0) {
    Space& sp = IndexAccess::protocol(*index_).space();
    sp.from_host(split_queries_, queries, sizeof(float) * batch * corpus_.dim, /*wait=*/true);
    engine().prepare_queries(split_queries_, batch, sp.stream());
  }
}

void BenchIndex::broadcast(int batch) {
  if (world_size() == 1) return;
  data().broadcast_async(split_queries_, sizeof(float) * batch * corpus_.dim, 0);
  data().wait("broadcast");
}

void BenchIndex::gather(int batch, int k) {
  if (world_size() == 1) return;
  data().allgather_async(split_local_, split_gathered_, sizeof(Candidate) * batch * k);
  data().wait("all-gather");
}

void BenchIndex::search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
                        const FilterProgram* const* filters, std::int32_t* counts) {
  index_->search(rank() == 0 ? queries : nullptr, batch, k, ids, scores, filters, counts);
}

void BenchIndex::search_split(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
                              StepTimes* t) {
  Engine& e = engine();
  Space& sp = IndexAccess::protocol(*index_).space();
  if (!timer_) timer_ = make_device_timer(e);  // events on this index's stream, freed with it
  DeviceTimer* timer = timer_.get();
  auto t0 = Clock::now();
  admit(queries, batch);
  sp.synchronize();
  t->admit = ms_since(t0);
  t0 = Clock::now();
  broadcast(batch);
  sp.synchronize();
  t->bcast = ms_since(t0);
  t0 = Clock::now();
  timer->start();
  SearchArgs a;
  a.queries = split_queries_;
  a.batch = batch;
  a.k = k;
  a.out = split_local_;
  a.stream = sp.stream();
  e.search(a);
  timer->stop();
  sp.synchronize();
  t->scan = ms_since(t0);
  t->scan_dev = timer->elapsed_ms();
  t0 = Clock::now();
  host().barrier();
  t->skew = ms_since(t0);
  t0 = Clock::now();
  gather(batch, k);
  sp.synchronize();
  t->gather = ms_since(t0);
  t->merge = 0;
  t->exported = 0;
  if (rank() != 0) return;
  const Candidate* fin = split_local_;
  if (world_size() > 1) {
    t0 = Clock::now();
    sp.merge(split_gathered_, world_size(), static_cast<std::int64_t>(batch) * k, batch, k, split_merged_);
    sp.synchronize();
    t->merge = ms_since(t0);
    fin = split_merged_;
  }
  t0 = Clock::now();
  const std::int64_t n = static_cast<std::int64_t>(batch) * k;
  sp.split(fin, n, corpus_.metric == Metric::kL2, static_cast<std::int64_t*>(sp.mapped(split_ids_)),
           static_cast<float*>(sp.mapped(split_scores_)), sp.stream());
  sp.synchronize();
  std::memcpy(ids, split_ids_, static_cast<std::size_t>(n) * sizeof(std::int64_t));
  std::memcpy(scores, split_scores_, static_cast<std::size_t>(n) * sizeof(float));
  t->exported = ms_since(t0);
}

// ---------------------------------------------------------------- checks

namespace {

struct Scored {
  double s;
  std::int64_t id;
};

template <typename T>
void bcast_vector(Communicator& c, std::vector<T>* v) {
  std::int64_t n = static_cast<std::int64_t>(v->size());
  c.broadcast(&n, sizeof n, 0);
  v->resize(static_cast<size_t>(n));
  if (n > 0) c.broadcast(v->data(), sizeof(T) * static_cast<size_t>(n), 0);
}

}  // namespace

std::vector<CheckResult> check_samples(const CorpusSpec& c, Communicator& host, RowRange mine,
                                       const std::vector<float>& queries_in, const std::vector<Sample>& samples_in,
                                       int entries, CheckMode mode, int threads, int check_device,
                                       CheckInfo* info) {
  // What the oracle scores is what the engine scores. float16/bfloat16 cosine: the inner product
  // of the rounded unit rows with the unit query (normalize_rows' arithmetic), as the engine
  // tests do; float32 cosine: the oracle divides by its own float64 norms.
  const bool rounded_cosine = c.metric == Metric::kCosine && c.dtype != Dtype::kFloat32;
  const Metric m = rounded_cosine ? Metric::kInnerProduct : c.metric;
  std::vector<float> queries = queries_in;
  if (rounded_cosine) normalize_rows(queries.data(), static_cast<std::int64_t>(queries.size()) / c.dim, c.dim, 0, "query");
  const std::int64_t dim = c.dim;
  const int world = host.world_size(), rank = host.rank();
  auto better = [m](double a, std::int64_t ia, double b, std::int64_t ib) { return oracle::better(m, a, ia, b, ib); };

  // Every rank learns the samples (entry, query, k, ids, reported scores, filter).
  std::vector<std::int32_t> meta;
  std::vector<std::int64_t> all_ids, fmeta;
  std::vector<float> all_scores;
  if (rank == 0) {
    for (const auto& s : samples_in) {
      meta.insert(meta.end(), {s.entry, s.query, s.k});
      all_ids.insert(all_ids.end(), s.ids.begin(), s.ids.end());
      all_scores.insert(all_scores.end(), s.scores.begin(), s.scores.end());
      fmeta.insert(fmeta.end(), {s.filter_column, s.filter_lo, s.filter_hi});
    }
  }
  bcast_vector(host, &meta);
  bcast_vector(host, &all_ids);
  bcast_vector(host, &all_scores);
  bcast_vector(host, &fmeta);
  const int ns = static_cast<int>(meta.size() / 3);
  // Filtered samples: whether row `id` passes sample i's filter (the attribute regenerated here,
  // independently of the index's evaluation).
  bool any_filter = false;
  for (int i = 0; i < ns; ++i) {
    if (fmeta[3 * i] < 0) continue;
    any_filter = true;
    SHARDTOPK_EXPECTS(fmeta[3 * i] < static_cast<std::int64_t>(c.attributes.size()), "check: sample ", i,
                      " filters attribute ", fmeta[3 * i], " of ", c.attributes.size());
  }
  const bool updated = c.added_rows > 0 || static_cast<bool>(c.deleted);
  const std::int64_t id_end = c.rows + c.added_rows;  // ids [0, id_end) may be rows
  auto is_live = [&](std::int64_t id) { return id >= 0 && id < id_end && !(c.deleted && c.deleted(id)); };
  auto row_passes = [&](int i, std::int64_t id) {
    const std::int64_t col = fmeta[3 * static_cast<size_t>(i)];
    if (col < 0) return true;
    const std::int64_t v = generated_attribute(c.attributes[static_cast<size_t>(col)], c.seed, id, c.rows);
    return v >= fmeta[3 * static_cast<size_t>(i) + 1] && v <= fmeta[3 * static_cast<size_t>(i) + 2];
  };
  std::vector<size_t> off(ns + 1, 0);
  int kmax = 1;
  for (int i = 0; i < ns; ++i) {
    off[i + 1] = off[i] + meta[3 * i + 2];
    kmax = std::max(kmax, meta[3 * i + 2]);
  }
  std::vector<int> qs;  // distinct sampled queries
  for (int i = 0; i < ns; ++i) qs.push_back(meta[3 * i + 1]);
  std::sort(qs.begin(), qs.end());
  qs.erase(std::unique(qs.begin(), qs.end()), qs.end());
  const int nq = static_cast<int>(qs.size());
  std::vector<int> qslot(queries.size() / dim + 1, -1);
  for (int i = 0; i < nq; ++i) qslot[qs[i]] = i;

  // Count mode: per sample, the reported K-th score and ε from the reported scores. A filtered
  // answer with fewer real results than k must hold every row that passes: its threshold is
  // then the worst possible score, so that any passing row left out counts as missed.
  std::vector<double> thr(ns), eps(ns);
  std::vector<int> count(ns);  // real results: the ids before the first kPadId
  std::vector<std::vector<std::int64_t>> sorted_ids(ns);
  for (int i = 0; i < ns; ++i) {
    const int k = meta[3 * i + 2];
    int n = 0;
    while (n < k && all_ids[off[i] + n] != kPadId) ++n;
    count[i] = n;
    const double worst = m == Metric::kL2 ? HUGE_VAL : -HUGE_VAL;
    thr[i] = n == k ? all_scores[off[i] + k - 1] : worst;
    eps[i] = n > 0 ? oracle::epsilon(all_scores[off[i]], all_scores[off[i] + n - 1]) : oracle::epsilon(0, 0);
    sorted_ids[i].assign(all_ids.begin() + off[i], all_ids.begin() + off[i] + n);
    std::sort(sorted_ids[i].begin(), sorted_ids[i].end());
  }
  std::vector<std::vector<int>> samples_of_query(nq);
  for (int i = 0; i < ns; ++i) samples_of_query[qslot[meta[3 * i + 1]]].push_back(i);

  // Count mode on this rank's GPU (device_check.hpp): regenerated rows, float64 scores, the
  // same comparisons as the host scan below. Each rank decides for itself; the path is reported.
  const bool oracle_mode = mode != CheckMode::kCount && !any_filter;
  bool use_device = false;
  std::string why;
  if (!oracle_mode && check_device > 0) {
    if (any_filter) {
      why = "filtered samples (the device pass counts over every row)";
    } else if (updated) {
      why = "updated rows (the device pass counts over the generated corpus)";
    } else if (!c.generated) {
      why = "rows read from " + c.path + " (the device pass regenerates rows)";
    } else {
      use_device = device_count_available(c.metric, host.local_rank(), &why);
    }
  }
  std::vector<long long> missed_dev(ns, 0);
  double device_s = -1;
  if (!oracle_mode) {
    bool ok = true;
    std::string msg;
    if (use_device) {
      try {
        std::vector<float> qrows(static_cast<size_t>(nq) * dim);
        for (int qi = 0; qi < nq; ++qi)
          std::copy_n(queries.data() + static_cast<size_t>(qs[qi]) * dim, dim,
                      qrows.data() + static_cast<size_t>(qi) * dim);
        std::vector<std::int32_t> sample_query(ns);
        std::vector<std::int64_t> flat_ids, id_off(ns + 1, 0);
        for (int i = 0; i < ns; ++i) {
          sample_query[i] = qslot[meta[3 * i + 1]];
          flat_ids.insert(flat_ids.end(), sorted_ids[i].begin(), sorted_ids[i].end());
          id_off[i + 1] = static_cast<std::int64_t>(flat_ids.size());
        }
        DeviceCountInput in;
        in.seed = c.seed;
        in.dtype = c.dtype;
        in.metric = c.metric;
        in.dim = dim;
        in.rows = mine;
        in.device = host.local_rank();
        in.queries = qrows.data();
        in.nq = nq;
        in.ns = ns;
        in.sample_query = sample_query.data();
        in.thr = thr.data();
        in.eps = eps.data();
        in.sorted_ids = flat_ids.data();
        in.id_off = id_off.data();
        ok = device_count_missed(in, missed_dev.data(), &device_s);
        if (!ok) {
          std::string reason;
          (void)device_count_available(c.metric, in.device, &reason);
          msg = "device count pass unavailable on device " + std::to_string(in.device) +
                (reason.empty() ? std::string() : ": " + reason);
        }
      } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
      }
    }
    host.check(ok, msg);  // every rank, device pass or not: one failure ends the check everywhere
  }

  // Scan this rank's rows in slices on the host: float64 scores of every sampled query (count
  // mode: unless the device pass counted the misses, or --check-device 2 wants both).
  const bool host_scan = oracle_mode || !use_device || check_device == 2;
  threads = std::max(1, threads);
  std::vector<std::vector<Scored>> heaps(static_cast<size_t>(threads) * nq);  // worst on top
  std::vector<long long> missed(static_cast<size_t>(threads) * ns, 0);
  auto heap_cmp = [&](const Scored& a, const Scored& b) { return better(a.s, a.id, b.s, b.id); };
  const std::int64_t slice = std::max<std::int64_t>(1024, std::min<std::int64_t>(65536, (1 << 24) / dim));
  // This rank's corpus rows, and its share of the rows added by updates.
  std::vector<RowRange> scan{mine};
  if (c.added_rows > 0) {
    const RowRange share = shard_rows(c.added_rows, world, rank);
    scan.push_back(RowRange{c.rows + share.lo, c.rows + share.hi});
  }
  std::int64_t widest = 1;
  for (const RowRange& r : scan) widest = std::max(widest, r.size());
  std::vector<float> rows(host_scan ? static_cast<size_t>(std::min(slice, widest) * dim) : 0);
  std::vector<RowRange> slices;
  for (const RowRange& r : scan)
    for (std::int64_t lo = r.lo; lo < r.hi; lo += slice) slices.push_back(RowRange{lo, std::min(lo + slice, r.hi)});
  for (std::size_t si = 0; host_scan && si < slices.size(); ++si) {
    const std::int64_t lo = slices[si].lo, n = slices[si].size();
    stored_rows(c, lo, n, rows.data(), threads);
    parallel_for(n, threads, [&](std::int64_t a, std::int64_t b, int t) {
      for (std::int64_t i = a; i < b; ++i) {
        const std::int64_t id = lo + i;
        if (updated && !is_live(id)) continue;
        const float* x = rows.data() + i * dim;
        for (int qi = 0; qi < nq; ++qi) {
          const double s = oracle::score(m, queries.data() + static_cast<size_t>(qs[qi]) * dim, x, dim);
          if (oracle_mode) {
            auto& h = heaps[static_cast<size_t>(t) * nq + qi];
            if (static_cast<int>(h.size()) < kmax) {
              h.push_back({s, id});
              std::push_heap(h.begin(), h.end(), heap_cmp);
            } else if (better(s, id, h.front().s, h.front().id)) {
              std::pop_heap(h.begin(), h.end(), heap_cmp);
              h.back() = {s, id};
              std::push_heap(h.begin(), h.end(), heap_cmp);
            }
          } else {
            for (int si : samples_of_query[qi]) {
              if (any_filter && !row_passes(si, id)) continue;
              const bool beats = m == Metric::kL2 ? s < thr[si] - eps[si] : s > thr[si] + eps[si];
              if (beats && !std::binary_search(sorted_ids[si].begin(), sorted_ids[si].end(), id))
                ++missed[static_cast<size_t>(t) * ns + si];
            }
          }
        }
      }
    });
  }

  // Combine threads, then ranks, on rank 0.
  std::vector<std::vector<Scored>> truth(nq);
  std::vector<long long> missed_total(ns, 0), disagree(ns, 0);
  std::vector<std::string> disagree_first(ns);
  std::string path = "oracle";
  if (oracle_mode) {
    std::vector<Scored> local(static_cast<size_t>(nq) * kmax, Scored{0, -1});
    for (int qi = 0; qi < nq; ++qi) {
      std::vector<Scored> all;
      for (int t = 0; t < threads; ++t) {
        auto& h = heaps[static_cast<size_t>(t) * nq + qi];
        all.insert(all.end(), h.begin(), h.end());
      }
      std::sort(all.begin(), all.end(), heap_cmp);
      for (int j = 0; j < std::min<int>(kmax, static_cast<int>(all.size())); ++j) local[qi * kmax + j] = all[j];
    }
    std::vector<Scored> gathered(local.size() * world);
    host.allgather(local.data(), gathered.data(), local.size() * sizeof(Scored));
    for (int qi = 0; qi < nq; ++qi) {
      std::vector<Scored> all;
      for (int r = 0; r < world; ++r)
        for (int j = 0; j < kmax; ++j) {
          const Scored& x = gathered[(static_cast<size_t>(r) * nq + qi) * kmax + j];
          if (x.id >= 0) all.push_back(x);
        }
      std::sort(all.begin(), all.end(), heap_cmp);
      if (static_cast<int>(all.size()) > kmax) all.resize(kmax);
      truth[qi] = std::move(all);
    }
  } else {
    // Per rank: the counts used ([ns], the device's when it ran), then with --check-device 2 the
    // host's ([ns]) to compare with them.
    const int w = check_device == 2 ? 2 : 1;
    std::vector<long long> host_counts(ns, 0);
    for (int t = 0; t < threads; ++t)
      for (int i = 0; i < ns; ++i) host_counts[i] += missed[static_cast<size_t>(t) * ns + i];
    std::vector<long long> local(static_cast<size_t>(w) * ns);
    for (int i = 0; i < ns; ++i) {
      local[i] = use_device ? missed_dev[i] : host_counts[i];
      if (w == 2) local[ns + i] = host_counts[i];
    }
    std::vector<long long> gathered(local.size() * world);
    if (ns > 0) host.allgather(local.data(), gathered.data(), sizeof(long long) * local.size());
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < ns; ++i) {
        const long long* g = gathered.data() + static_cast<size_t>(r) * w * ns;
        missed_total[i] += g[i];
        if (w == 2 && g[i] != g[ns + i] && disagree[i]++ == 0)
          disagree_first[i] = "rank " + std::to_string(r) + " counted " + std::to_string(g[i]) +
                              " missed rows on the device, " + std::to_string(g[ns + i]) + " on the host";
      }
    int flag = use_device ? 1 : 0;
    std::vector<int> flags(world, 0);
    host.allgather(&flag, flags.data(), sizeof flag);
    const int on_device = static_cast<int>(std::count(flags.begin(), flags.end(), 1));
    path = on_device == world ? (check_device == 2 ? "count-device+host" : "count-device")
           : on_device == 0   ? "count-host"
                              : "count-mixed";
  }
  if (info) {
    info->mode = path;
    info->note = check_device > 0 && !oracle_mode && !use_device ? why : "";
    info->device_s = device_s;
  }

  std::vector<CheckResult> out(entries);
  if (rank != 0) return out;
  auto note = [](CheckResult& r, const std::string& s) {
    if (r.first_problem.empty()) r.first_problem = s;
  };
  for (int i = 0; i < ns; ++i) {
    const int entry = meta[3 * i], q = meta[3 * i + 1], k = meta[3 * i + 2];
    CheckResult& res = out[entry];
    ++res.queries;
    const std::int64_t* got = all_ids.data() + off[i];
    const float* gs = all_scores.data() + off[i];
    // The returned rows as stored, regenerated (or read) one by one.
    std::vector<float> mini(static_cast<size_t>(k) * dim);
    std::vector<std::int64_t> mini_ids;
    long long invalid = 0;
    for (int j = 0; j < k; ++j) {
      if (j >= count[i]) {  // padding: kPadId only
        invalid += got[j] != kPadId;
        continue;
      }
      if (!is_live(got[j]) || !row_passes(i, got[j])) {  // not a live row, or one the filter excludes
        ++invalid;
        continue;
      }
      stored_rows(c, got[j], 1, mini.data() + mini_ids.size() * dim, 1);
      mini_ids.push_back(got[j]);
    }
    const float* query = queries.data() + static_cast<size_t>(q) * dim;
    long long wrong = 0;
    if (oracle_mode) {
      const auto& tr = truth[qslot[q]];
      if (static_cast<int>(tr.size()) < k) {
        ++wrong;
        note(res, "oracle found fewer rows than k");
        res.wrong += wrong;
        continue;
      }
      std::vector<std::int64_t> tid(k);
      std::vector<double> ts(k);
      for (int j = 0; j < k; ++j) {
        tid[j] = tr[j].id;
        ts[j] = tr[j].s;
      }
      const oracle::Check ck = oracle::check_query(m, mini.data(), static_cast<std::int64_t>(mini_ids.size()),
                                                   mini_ids.data(), query, dim, k, got, gs, tid.data(), ts.data());
      wrong = (k - ck.hits) + ck.bad_scores + ck.out_of_order + ck.duplicates;
      res.near_ties += ck.near_tie_swaps;
      if (wrong > 0)
        note(res, "query " + std::to_string(q) + " k=" + std::to_string(k) + ": hits " + std::to_string(ck.hits) +
                      ", bad scores " + std::to_string(ck.bad_scores) + ", out of order " +
                      std::to_string(ck.out_of_order) + ", duplicates " + std::to_string(ck.duplicates) +
                      "; first returned id " + std::to_string(got[0]) + " vs oracle " + std::to_string(tid[0]));
    } else {
      const double e = eps[i];
      long long bad = invalid, order = 0, dup = 0;
      std::vector<double> s64(k, NAN);
      size_t r = 0;
      for (int j = 0; j < count[i]; ++j) {
        if (!is_live(got[j]) || !row_passes(i, got[j])) continue;
        s64[j] = oracle::score(m, query, mini.data() + r * dim, dim);
        ++r;
        if (std::fabs(static_cast<double>(gs[j]) - s64[j]) > e) ++bad;
        if (j > 0 && !std::isnan(s64[j - 1]) && (m == Metric::kL2 ? s64[j] < s64[j - 1] - e : s64[j] > s64[j - 1] + e))
          ++order;
      }
      for (size_t j = 1; j < sorted_ids[i].size(); ++j) dup += sorted_ids[i][j] == sorted_ids[i][j - 1];
      wrong = missed_total[i] + bad + order + dup + disagree[i];
      if (disagree[i] > 0)
        note(res, "query " + std::to_string(q) + " k=" + std::to_string(k) + ": device and host counts differ on " +
                      std::to_string(disagree[i]) + " rank(s): " + disagree_first[i]);
      if (wrong > 0)
        note(res, "query " + std::to_string(q) + " k=" + std::to_string(k) + ": " + std::to_string(missed_total[i]) +
                      " rows beat the returned K-th by more than eps" +
                      (count[i] < k ? " (" + std::to_string(count[i]) + " real results of k " + std::to_string(k) + ")"
                                    : std::string()) +
                      ", bad scores " + std::to_string(bad) +
                      ", out of order " + std::to_string(order) + ", duplicates " + std::to_string(dup));
    }
    res.wrong += wrong;
  }
  return out;
}

}  // namespace shardtopk::bench
