#include "shardtopk/results.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"

namespace shardtopk {

void write_results(const std::string& path, const ResultMeta& m, const std::vector<std::int64_t>& ids,
                   const std::vector<float>& scores, std::int64_t nq, const std::vector<std::int32_t>* counts) {
  SHARDTOPK_ASSERT(ids.size() == static_cast<size_t>(nq * m.k) && scores.size() == ids.size());
  SHARDTOPK_ASSERT(!counts || counts->size() == static_cast<size_t>(nq));
  H5Writer w(path);
  w.write_i64("ids", ids.data(), nq, m.k);
  w.write_f32("scores", scores.data(), nq, m.k);
  if (counts) {
    w.write_i32("counts", counts->data(), nq, 0);
    w.write_strings("filter", {m.filter});
  }
  w.set_attr("metric", to_string(m.metric));
  w.set_attr("score_units", std::string(m.metric == Metric::kL2 ? "squared_l2_distance" : "similarity"));
  w.set_attr("k", static_cast<std::int64_t>(m.k));
  w.set_attr("world_size", static_cast<std::int64_t>(m.world_size));
  w.set_attr("engine", m.engine);
  w.set_attr("comm", m.comm);
  w.set_attr("dtype", to_string(m.dtype));
  w.set_attr("corpus_path", m.corpus_path);
  w.set_attr("corpus_dataset", m.corpus_dataset);
  w.set_attr("corpus_rows", m.corpus_rows);
  w.set_attr("corpus_dim", m.corpus_dim);
  w.set_attr("queries_path", m.queries_path);
  w.set_attr("queries_dataset", m.queries_dataset);
  w.set_attr("version", std::string(version()));
  w.close();
}

EvalReport evaluate(const std::string& results_path, const std::string& truth_path) {
  // The corpus the results were searched over (search --out records it) against the truth
  // file's own `train`: a truth file for another corpus is the usual mistake behind a mismatch.
  const FileInfo rinfo = inspect_file(results_path);
  const FileInfo tinfo = inspect_file(truth_path);
  // Each file holds what it is read for, or the message names the flag and what it expects.
  auto require = [](const FileInfo& fi, const std::string& path, const char* flag, const char* what,
                    std::initializer_list<const char*> names) {
    for (const char* n : names) {
      const bool has = std::any_of(fi.datasets.begin(), fi.datasets.end(), [&](const DatasetInfo& d) {
        return d.name == n || d.name == std::string("/") + n;
      });
      SHARDTOPK_EXPECTS(has, flag, " '", path, "' has no dataset '", n, "': expected ", what);
    }
  };
  require(rinfo, results_path, "--results", "a result file written by `search --out` (ids, scores)", {"ids", "scores"});
  for (const auto& d : rinfo.datasets)
    SHARDTOPK_EXPECTS(d.name != "counts", "'", results_path, "' holds the results of a filtered search (dataset counts): ",
                      "the ground truth in '", truth_path, "' is over the whole corpus, so recall against it means nothing");
  require(tinfo, truth_path, "--truth", "ann-benchmarks ground truth (neighbors, distances), such as an imported file",
          {"neighbors", "distances"});
  auto int_attr = [&](const char* name) -> std::int64_t {
    const auto it = rinfo.int_attributes.find(name);
    return it == rinfo.int_attributes.end() || it->second.size() != 1 ? -1 : it->second[0];
  };
  const std::int64_t crows = int_attr("corpus_rows"), cdim = int_attr("corpus_dim");
  const auto rcorpus = rinfo.attributes.find("corpus_path");
  const std::string corpus_named =
      rcorpus == rinfo.attributes.end() ? std::string("the corpus")
                                        : "corpus '" + rcorpus->second + "' [" + std::to_string(crows) + " x " +
                                              std::to_string(cdim) + "]";
  int same_corpus = -1;  // unknown
  for (const auto& d : tinfo.datasets)
    if ((d.name == "train" || d.name == "/train") && d.dims.size() == 2 && crows >= 0 && cdim >= 0)
      same_corpus = d.dims[0] == crows && d.dims[1] == cdim ? 1 : 0;
  SHARDTOPK_EXPECTS(same_corpus != 0, "'", truth_path, "' is not the ground truth of these results: '", results_path,
                    "' was searched over ", corpus_named, " but the truth file's train is a different shape; pass -t ",
                    "the file that holds that corpus's ground truth (the imported .h5 itself)");

  std::int64_t nq = 0, k = 0, tq = 0, tk = 0, dq = 0, dk = 0;
  const std::vector<std::int64_t> ids = read_int64_matrix(results_path, "ids", &nq, &k);
  const HostMatrix scores = read_matrix(results_path, "scores", "result row");
  const std::vector<std::int64_t> tids = read_int64_matrix(truth_path, "neighbors", &tq, &tk);
  const HostMatrix tdist = read_matrix(truth_path, "distances", "truth row");
  dq = tdist.rows;
  dk = tdist.cols;
  SHARDTOPK_EXPECTS(scores.rows == nq && scores.cols == k, "'", results_path, "': scores [", scores.rows, ",",
                    scores.cols, "] do not match ids [", nq, ",", k, "]");
  SHARDTOPK_EXPECTS(nq <= tq, "'", truth_path, "' has ground truth for ", tq, " queries but '", results_path,
                    "' has ", nq, " (search the same queries file)");
  SHARDTOPK_EXPECTS(dq == tq && dk == tk, "'", truth_path, "': distances [", dq, ",", dk,
                    "] do not match neighbors [", tq, ",", tk, "]");
  // More result columns than truth columns: the result lists are best first, so their first tk
  // columns are a top-tk answer; evaluate those at the truth's K and say so.
  const std::int64_t result_k = k;
  if (k > tk) k = tk;

  std::string metric = read_string_attribute(results_path, "metric");
  const std::string tdistance = read_string_attribute(truth_path, "distance");
  if (metric.empty()) metric = tdistance == "angular" ? "cosine" : tdistance == "euclidean" ? "l2" : "inner_product";
  const Metric m = parse_metric(metric, "'" + results_path + "': attribute metric");
  if (!tdistance.empty()) {
    const Metric tm = parse_metric(tdistance, "'" + truth_path + "': attribute distance");
    SHARDTOPK_EXPECTS(tm == m, "'", results_path, "' was searched with metric ", to_string(m), " but the ground truth in '",
                      truth_path, "' is for distance='", tdistance, "' (", to_string(tm),
                      "): recall against it would mean nothing; ",
                      same_corpus == 1
                          ? "search again with --set search.metric=" + to_string(tm) + " (the truth's metric)"
                          : "pass -t the ground truth of " + corpus_named + " (the imported .h5 itself), or search "
                            "again with --set search.metric=" + to_string(tm) + " if this truth file is the right one");
  }
  const bool squared = read_string_attribute(truth_path, "distance_units") == "squared";

  // Convert a truth value to the result file's units (similarity, or squared l2 distance).
  auto truth_units = [&](float v) -> double {
    if (m == Metric::kL2) return squared ? v : static_cast<double>(v) * v;
    if (tdistance == "angular") return 1.0 - v;  // ann-benchmarks stores cosine distance
    return v;
  };

  EvalReport rep;
  rep.k = static_cast<int>(k);
  rep.result_k = static_cast<int>(result_k);
  rep.queries = nq;
  rep.metric = to_string(m);
  std::vector<int> ks;
  for (int c : {1, 10, 100}) if (c <= k) ks.push_back(c);
  if (std::find(ks.begin(), ks.end(), static_cast<int>(k)) == ks.end()) ks.push_back(static_cast<int>(k));
  // An id outside the truth's top-k is a hit only when its *true* score is within ε of the k-th
  // (a near tie). The true score comes from the truth file's own rows (float64 oracle), never
  // from the result file; without `train` and `test` in the truth file, the result's score is
  // used and the report says so. A repeated id is never a hit.
  HostMatrix train, test;
  bool have_rows = false;
  {
    bool tr = false, te = false;
    for (const auto& d : inspect_file(truth_path).datasets) {
      tr = tr || d.name == "train" || d.name == "/train";
      te = te || d.name == "test" || d.name == "/test";
    }
    if (tr && te) {
      train = read_matrix(truth_path, "train", "truth train row");
      test = read_matrix(truth_path, "test", "truth test row");
      have_rows = train.cols == test.cols && test.rows >= nq;
    }
  }
  rep.scores_verified = have_rows;
  std::map<int, std::int64_t> hits;
  for (std::int64_t q = 0; q < nq; ++q) {
    for (int kk : ks) {
      const double best = truth_units(tdist.data[q * tk]);
      const double kth = truth_units(tdist.data[q * tk + kk - 1]);
      const double eps = oracle::epsilon(best, kth);
      std::unordered_set<std::int64_t> truth(tids.begin() + q * tk, tids.begin() + q * tk + kk);
      std::unordered_set<std::int64_t> seen;
      for (int j = 0; j < kk; ++j) {
        const std::int64_t id = ids[q * result_k + j];
        const bool repeated = !seen.insert(id).second;
        double s = scores.data[q * result_k + j];
        if (have_rows && !truth.count(id)) {
          s = (id >= 0 && id < train.rows)
                  ? oracle::score(m, test.data.data() + q * test.cols, train.data.data() + id * train.cols, train.cols)
                  : (m == Metric::kL2 ? HUGE_VAL : -HUGE_VAL);  // not a row of the corpus: never a hit
        }
        const bool within = m == Metric::kL2 ? s <= kth + eps : s >= kth - eps;
        if (!repeated && (truth.count(id) || within)) ++hits[kk];
        else if (kk == k) ++rep.misses;
        if (kk == k && repeated) ++rep.duplicates;
        if (kk == k && !repeated && id != tids[q * tk + j]) {
          const double tj = truth_units(tdist.data[q * tk + j]);
          if (std::fabs(s - tj) <= eps) ++rep.near_tie_swaps;
        }
      }
    }
  }
  for (int kk : ks) rep.recall[kk] = nq ? static_cast<double>(hits[kk]) / (static_cast<double>(nq) * kk) : 0.0;
  return rep;
}

}  // namespace shardtopk
