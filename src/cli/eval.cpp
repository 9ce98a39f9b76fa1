// `shardtopk eval`: recall@k of a result file against ann-benchmarks ground truth, with a few
// answers shown by class label or word when the truth file carries them.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/results.hpp"

namespace shardtopk::cli {

int run_eval(const EvalArgs& a) {
  if (!a.json_out.empty())
    check_output_path(a.json_out, {{"results", a.results}, {"truth", a.truth}}, OutputKind::kText);
  const EvalReport r = evaluate(a.results, a.truth);
  std::printf("%lld queries, K=%d, metric %s (tie-tolerant, eps = 1e-5*(max(|best|,|kth|)+1))\n",
              static_cast<long long>(r.queries), r.k, r.metric.c_str());
  if (r.result_k > r.k)
    std::printf("  note: '%s' has K=%d columns but the truth has %d neighbours per query: recall is evaluated at "
                "K=%d on the first %d columns of each (best-first) result list\n",
                a.results.c_str(), r.result_k, r.k, r.k, r.k);
  nlohmann::json j = {{"queries", r.queries}, {"k", r.k}, {"result_k", r.result_k}, {"metric", r.metric}, {"near_tie_swaps", r.near_tie_swaps},
                      {"misses", r.misses}, {"duplicates", r.duplicates}, {"scores_verified", r.scores_verified}};
  for (const auto& kv : r.recall) {
    std::printf("  recall@%-4d %.4f\n", kv.first, kv.second);
    j["recall@" + std::to_string(kv.first)] = kv.second;
  }
  std::printf("  near-tie swaps (id differs from the truth, score within eps): %lld; misses at K: %lld"
              " (of which repeated ids: %lld)\n",
              static_cast<long long>(r.near_tie_swaps), static_cast<long long>(r.misses),
              static_cast<long long>(r.duplicates));
  if (!r.scores_verified)
    std::printf("  note: the truth file has no train/test rows, so near ties are judged by the result file's own"
                " scores\n");
  if (a.show > 0) {
    // Show a few answers with their class labels (Fashion-MNIST) or words (GloVe).
    std::int64_t nq = 0, k = 0;
    const auto ids = read_int64_matrix(a.results, "ids", &nq, &k);
    const FileInfo fi = inspect_file(a.truth);
    auto has = [&](const std::string& n) {
      return std::any_of(fi.datasets.begin(), fi.datasets.end(), [&](const DatasetInfo& d) { return d.name == n; });
    };
    static const char* kFashion[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    std::vector<std::int64_t> train_lab, test_lab;
    if (has("train_labels") && has("test_labels")) {
      train_lab = read_int64_vector(a.truth, "train_labels");
      test_lab = read_int64_vector(a.truth, "test_labels");
    }
    std::vector<std::string> train_words, test_words;
    if (has("train_words") && has("test_words")) {
      train_words = read_string_vector(a.truth, "train_words");
      test_words = read_string_vector(a.truth, "test_words");
    }
    auto label = [&](const std::vector<std::int64_t>& lab, std::int64_t i) -> std::string {
      if (i < 0 || i >= static_cast<std::int64_t>(lab.size())) return "?";
      const auto v = lab[i];
      return v >= 0 && v < 10 ? kFashion[v] : std::to_string(v);
    };
    auto word = [](const std::vector<std::string>& w, std::int64_t i) -> std::string {
      return i >= 0 && i < static_cast<std::int64_t>(w.size()) ? w[i] : "?";
    };
    const int shown_k = static_cast<int>(std::min<std::int64_t>(k, 5));
    for (std::int64_t qi = 0; qi < std::min<std::int64_t>(a.show, nq); ++qi) {
      std::printf("  query %lld", static_cast<long long>(qi));
      if (!test_lab.empty()) std::printf(" (%s)", label(test_lab, qi).c_str());
      if (!test_words.empty()) std::printf(" '%s'", word(test_words, qi).c_str());
      std::printf(" ->");
      for (int j2 = 0; j2 < shown_k; ++j2) {
        const auto id = ids[qi * k + j2];
        std::printf(" %lld", static_cast<long long>(id));
        if (!train_lab.empty()) std::printf(" (%s)", label(train_lab, id).c_str());
        if (!train_words.empty()) std::printf(" '%s'", word(train_words, id).c_str());
      }
      std::printf("\n");
    }
  }
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    SHARDTOPK_EXPECTS(out.good(), "cannot write '", a.json_out, "'");
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace shardtopk::cli
