// bench_json: the service's JSON costs on one thread, without the network: reading a search
// body into float32 rows (simdjson, and the event parser it falls back to) and writing a search
// answer. Bodies are what clients send: a {"query": [...], "k": 10} of D floats printed either
// shortest for float32 ("shortest", what this service writes) or as the double of each float32
// (`float64`, what Python's json writes for numpy float32 values); answers hold k ids and scores
// per query.
//
// Every parse is checked against the rows it was written from (bit for bit) and every answer's
// scores read back as the same float32; a mismatch counts in #wrong and the exit status is 1.
// Output (nccl-tests style): one JSON line per configuration, then a table.
//
//   bench_json                        # parse one 768-float query, write a k = 100 answer
//   bench_json -d 768,1024 -B 1,16 -k 10,100 -n 20000 -J out.jsonl
//   bench_json --readers simdjson --simdjson-kernel fallback   # as on a CPU without SIMD kernels
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.hpp"
#include "harness.hpp"
#include "service/answer_json.hpp"
#include "service/request_parse.hpp"

namespace {

using namespace shardtopk;
using namespace shardtopk::bench;
using namespace shardtopk::service;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::vector<long> parse_list(const std::string& s) {
  std::vector<long> out;
  for (const std::string& t : split_commas(s)) out.push_back(std::stol(t));
  return out;
}

// Unit-norm rows, as an embedding model gives them.
std::vector<float> make_rows(long batch, long dim, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(static_cast<std::size_t>(batch * dim));
  for (long q = 0; q < batch; ++q) {
    double norm = 0;
    for (long c = 0; c < dim; ++c) norm += std::pow(v[static_cast<std::size_t>(q * dim + c)] = g(rng), 2);
    for (long c = 0; c < dim; ++c) v[static_cast<std::size_t>(q * dim + c)] /= static_cast<float>(std::sqrt(norm));
  }
  return v;
}

std::string request_text(const std::vector<float>& rows, long batch, long dim, const std::string& format) {
  std::string s = batch == 1 ? "{\"query\": [" : "{\"queries\": [";
  char buf[40];
  for (long q = 0; q < batch; ++q) {
    if (batch > 1) s += q ? ", [" : "[";
    for (long c = 0; c < dim; ++c) {
      const float f = rows[static_cast<std::size_t>(q * dim + c)];
      const char* end = format == "shortest" ? std::to_chars(buf, buf + sizeof buf, f).ptr
                                             : std::to_chars(buf, buf + sizeof buf, static_cast<double>(f)).ptr;
      if (c) s += ", ";
      s.append(buf, static_cast<std::size_t>(end - buf));
    }
    if (batch > 1) s += "]";
  }
  return s + "], \"k\": 10}";
}

struct Times {
  double mean = 0, p50 = 0, p99 = 0;
};

template <class F>
Times time_it(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  Times t;
  for (double x : us) t.mean += x / static_cast<double>(us.size());
  t.p50 = percentile(us, 50);
  t.p99 = percentile(us, 99);
  return t;
}

json record(const std::string& op, const Times& t, long wrong) {
  json j;
  j["bench"] = "json";
  j["op"] = op;
  j["mean_us"] = t.mean;
  j["p50_us"] = t.p50;
  j["p99_us"] = t.p99;
  j["wrong"] = wrong;
  j["date"] = utc_now();
  j["git"] = git_commit();
  j["host"] = host_name();
  j["cpu"] = cpu_name();
  j["simdjson_kernel"] = json_reader_kernel();
  return j;
}

json bench_parse(long dim, long batch, const std::string& format, const std::string& reader, int warmup, int iters) {
  const std::vector<float> rows = make_rows(batch, dim, static_cast<std::uint64_t>(dim * 31 + batch));
  std::string body = request_text(rows, batch, dim, format);
  body.reserve(body.size() + kJsonPadding);  // as the front end holds a body: read in place
  const QueryShape shape{dim, static_cast<int>(std::max(batch, 1L)), nullptr};
  const JsonRead how{body.capacity(), reader == "simdjson"};
  long wrong = 0;
  SearchBody out;
  const Times t = time_it(warmup, iters, [&] { out = parse_json_search(body, shape, how); });
  if (reader == "simdjson") {  // the timed calls took the simdjson path, not the fallback
    SearchBody direct;
    if (!read_json_search_fast(body, shape, direct, body.capacity())) ++wrong;
  }
  if (out.nq != batch || out.queries.size() != rows.size() ||
      std::memcmp(out.queries.data(), rows.data(), 4 * rows.size()) != 0)
    ++wrong;
  json j = record("parse", t, wrong);
  j["dim"] = dim;
  j["batch"] = batch;
  j["format"] = format;
  j["reader"] = reader;
  j["body_bytes"] = body.size();
  j["MB_per_s"] = static_cast<double>(body.size()) / t.mean;
  return j;
}

json bench_write(long k, long batch, int warmup, int iters) {
  const std::vector<float> scores = make_rows(batch, k, static_cast<std::uint64_t>(k * 7 + batch));
  std::vector<std::int64_t> ids(scores.size());
  std::mt19937_64 rng(3);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 10000000000ull);
  const std::vector<std::int32_t> counts(static_cast<std::size_t>(batch), static_cast<std::int32_t>(k));
  std::string out;
  const Times t = time_it(warmup, iters, [&] {
    out.clear();
    write_search_json(out, ids.data(), scores.data(), counts.data(), static_cast<int>(batch), static_cast<int>(k),
                      "inner_product", 0.123);
  });
  long wrong = 0;
  const json parsed = json::parse(out);
  for (long q = 0; q < batch; ++q)
    for (long r = 0; r < k; ++r) {
      const std::size_t i = static_cast<std::size_t>(q * k + r);
      const json& v = parsed["scores"][static_cast<std::size_t>(q)][static_cast<std::size_t>(r)];
      const float back = static_cast<float>(v.get<double>());
      if (std::memcmp(&back, &scores[i], 4) != 0 || parsed["ids"][q][r].get<std::int64_t>() != ids[i]) ++wrong;
    }
  json j = record("write", t, wrong);
  j["k"] = k;
  j["batch"] = batch;
  j["body_bytes"] = out.size();
  j["MB_per_s"] = static_cast<double>(out.size()) / t.mean;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_json: reading JSON search bodies and writing JSON answers (one thread, no network)"};
  std::string dims_s = "768", batches_s = "1", ks_s = "100", formats_s = "shortest,float64",
              readers_s = "simdjson,events", json_out, kernel;
  int iters = 20000, warmup = 2000;
  app.add_option("-d,--dim", dims_s, "query dimensions, comma-separated")->capture_default_str();
  app.add_option("-B,--batch", batches_s, "queries per body / answer, comma-separated")->capture_default_str();
  app.add_option("-k", ks_s, "results per query of the written answers, comma-separated")->capture_default_str();
  app.add_option("--formats", formats_s, "number texts of the bodies: shortest (float32), float64")->capture_default_str();
  app.add_option("--readers", readers_s, "simdjson (the service's path), events (its fallback)")->capture_default_str();
  app.add_option("--simdjson-kernel", kernel,
                 "make simdjson use this kernel (icelake, haswell, westmere, fallback) instead of the best the CPU "
                 "runs: what reading costs on a host whose CPU (or virtual CPU) lacks the others");
  app.add_option("-n,--iters", iters, "timed calls per configuration")->capture_default_str();
  app.add_option("-w,--warmup", warmup, "untimed calls first")->capture_default_str();
  app.add_option("-J,--json", json_out, "also append the JSON lines to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  Table table({{"op", "", 6},
               {"reader", "", 9},
               {"format", "", 9},
               {"dim/k", "", 6},
               {"batch", "", 5},
               {"bytes", "", 8},
               {"mean", "(us)", 8},
               {"p50", "(us)", 8},
               {"p99", "(us)", 8},
               {"MB/s", "", 7},
               {"#wrong", "", 6}});
  std::vector<std::string> lines;
  long wrong = 0;
  try {
    if (!kernel.empty()) use_json_reader_kernel(kernel);
    auto emit = [&](const json& j, const std::string& reader, const std::string& format, long size) {
      std::cout << j.dump() << std::endl;
      write_json_line(json_out, j);
      wrong += j["wrong"].get<long>();
      lines.push_back(table.line({j["op"].get<std::string>(), reader, format, fmt_int(size), fmt_int(j["batch"].get<long>()),
                                  fmt_int(j["body_bytes"].get<long>()), fmt_num(j["mean_us"].get<double>(), 2),
                                  fmt_num(j["p50_us"].get<double>(), 2), fmt_num(j["p99_us"].get<double>(), 2),
                                  fmt_num(j["MB_per_s"].get<double>(), 0), fmt_int(j["wrong"].get<long>())}));
    };
    for (long d : parse_list(dims_s))
      for (long b : parse_list(batches_s))
        for (const std::string& f : split_commas(formats_s))
          for (const std::string& r : split_commas(readers_s)) emit(bench_parse(d, b, f, r, warmup, iters), r, f, d);
    for (long k : parse_list(ks_s))
      for (long b : parse_list(batches_s)) emit(bench_write(k, b, warmup, iters), "to_chars", "shortest", k);
  } catch (const std::exception& e) {
    std::cerr << "bench_json: " << e.what() << "\n";
    return 2;
  }
  std::cout << table.header();
  for (const auto& l : lines) std::cout << l;
  std::cout << "# simdjson kernel: " << json_reader_kernel() << " (" << cpu_name() << ")\n";
  return wrong == 0 ? 0 : 1;
}
