#include "service/answer_json.hpp"

#include <charconv>
#include <cstdint>
#include <cstring>

namespace shardtopk::service {
namespace {

// Longest texts std::to_chars writes: an int64 ("-9223372036854775808"), a float32 in shortest
// form ("-1.17549435e-38") with ".0" room, a double in shortest form.
constexpr std::size_t kIdChars = 20, kScoreChars = 17, kDoubleChars = 25;

// The only float32 values (all 2^32 checked) whose shortest text, read as a double and rounded
// to float32, gives another float32: ±7.038531e-26, a hair from a float32 midpoint. They are
// written with 9 significant digits, which read back right either way.
constexpr std::uint32_t kDoubleRoundingBits = 0x15ae43fdu;

char* write_score(char* p, char* end, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const std::to_chars_result r = (bits & 0x7fffffffu) == kDoubleRoundingBits
                                     ? std::to_chars(p, end, v, std::chars_format::scientific, 8)
                                     : std::to_chars(p, end, v);
  bool plain = true;  // digits only, perhaps a sign: "3" is a JSON integer, the answer gives floats
  for (const char* c = p; c < r.ptr; ++c)
    if (*c == '.' || *c == 'e' || *c == 'n' || *c == 'i') plain = false;
  p = r.ptr;
  if (plain) {
    *p++ = '.';
    *p++ = '0';
  }
  return p;
}

}  // namespace

void write_search_json(std::string& out, const std::int64_t* ids, const float* scores, const std::int32_t* counts,
                       int nq, int k, std::string_view metric, double took_ms) {
  std::size_t results = 0;
  for (int q = 0; q < nq; ++q) results += static_cast<std::size_t>(counts[q]);
  const std::size_t bound = 64 + metric.size() + kDoubleChars + 2 * (4 * static_cast<std::size_t>(nq) + 2) +
                            results * (kIdChars + 1 + kScoreChars + 1);
  const std::size_t start = out.size();
  out.resize(start + bound);
  char* p = &out[start];
  char* const end = p + bound;
  auto put = [&p](std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    p += s.size();
  };
  auto rows = [&](auto&& one) {
    *p++ = '[';
    for (int q = 0; q < nq; ++q) {
      if (q) *p++ = ',';
      *p++ = '[';
      const std::size_t row = static_cast<std::size_t>(q) * static_cast<std::size_t>(k);
      for (std::int32_t x = 0; x < counts[q]; ++x) {
        if (x) *p++ = ',';
        one(row + static_cast<std::size_t>(x));
      }
      *p++ = ']';
    }
    *p++ = ']';
  };
  put("{\"ids\":");
  rows([&](std::size_t i) { p = std::to_chars(p, end, ids[i]).ptr; });
  put(",\"metric\":\"");
  put(metric);
  put("\",\"scores\":");
  rows([&](std::size_t i) { p = write_score(p, end, scores[i]); });
  put(",\"took_ms\":");
  p = std::to_chars(p, end, took_ms).ptr;
  *p++ = '}';
  out.resize(static_cast<std::size_t>(p - out.data()));
}

void write_rank_json(std::string& out, const std::int64_t* ranks, const float* scores, int n, std::string_view metric,
                     std::uint64_t applied_seq, double took_ms) {
  const std::size_t bound =
      96 + metric.size() + 2 * kDoubleChars + static_cast<std::size_t>(n) * (kIdChars + 1 + kScoreChars + 1);
  const std::size_t start = out.size();
  out.resize(start + bound);
  char* p = &out[start];
  char* const end = p + bound;
  auto put = [&p](std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    p += s.size();
  };
  put("{\"applied_seq\":");
  p = std::to_chars(p, end, applied_seq).ptr;
  put(",\"metric\":\"");
  put(metric);
  put("\",\"ranks\":[");
  for (int i = 0; i < n; ++i) {
    if (i) *p++ = ',';
    p = std::to_chars(p, end, ranks[i]).ptr;
  }
  put("],\"scores\":[");
  for (int i = 0; i < n; ++i) {
    if (i) *p++ = ',';
    p = write_score(p, end, scores[i]);
  }
  put("],\"took_ms\":");
  p = std::to_chars(p, end, took_ms).ptr;
  *p++ = '}';
  out.resize(static_cast<std::size_t>(p - out.data()));
}

void write_order_json(std::string& out, const OrderAnswer& a) {
  if (!out.empty() && out.back() == '}') out.pop_back();
  char buf[64];
  auto num = [&](auto v) { out.append(buf, static_cast<std::size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf)); };
  auto score = [&](float v) { out.append(buf, static_cast<std::size_t>(write_score(buf, buf + sizeof buf, v) - buf)); };
  auto list = [&](const char* name, auto&& one) {
    out += ",\"";
    out += name;
    out += "\":[";
    for (int q = 0; q < a.nq; ++q) {
      if (q) out += ',';
      one(q);
    }
    out += ']';
  };
  auto last = [&](int q) { return static_cast<std::size_t>(q) * static_cast<std::size_t>(a.k) + static_cast<std::size_t>(a.counts[q] - 1); };
  if (!a.count_only)
    list("kth_score", [&](int q) {
      if (a.counts[q] > 0) score(a.scores[last(q)]);
      else out += "null";
    });
  out += ",\"applied_seq\":";
  num(a.applied_seq);
  if (a.stats) {
    list("total", [&](int q) {
      if (a.stats[q].total >= 0) num(a.stats[q].total);
      else out += "null";
    });
    list("rows_scanned", [&](int q) { num(a.stats[q].scanned); });
    if (a.filtered) list("rows_passing", [&](int q) { num(a.stats[q].passing); });
    if (!a.count_only)
      list("next", [&](int q) {
        if (a.counts[q] < a.k || a.counts[q] == 0) {
          out += "null";
          return;
        }
        out += '[';
        score(a.scores[last(q)]);
        out += ',';
        num(a.ids[last(q)]);
        out += ']';
      });
  }
  out += '}';
}

}  // namespace shardtopk::service
