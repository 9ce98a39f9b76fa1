#include "service/api_keys.hpp"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "core/parse.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

constexpr double kMaxRate = 1e6;

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (unsigned char c : n)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

Role parse_role(const std::string& r, const std::string& where) {
  if (r == "read") return Role::kRead;
  if (r == "write") return Role::kWrite;
  if (r == "admin") return Role::kAdmin;
  throw Error(where + "role '" + r + "' unknown (allowed: read, write, admin)");
}

void check_name(const std::string& n, const std::string& where) {
  SHARDTOPK_EXPECTS(valid_name(n), where, "key name '", n,
                    "' is not 1 .. 64 characters of letters, digits, '.', '_' and '-'");
}

// rate=R (0 < R <= 1e6 requests per second) and burst=B (1 <= B <= 1e6; only with a rate).
void check_limits(double rate, double burst, bool burst_given, const std::string& where) {
  SHARDTOPK_EXPECTS(std::isfinite(rate) && rate >= 0 && rate <= kMaxRate, where, "rate=", rate,
                    " out of range (allowed: 0 (not limited) or 0 < rate <= 1000000 requests per second)");
  if (!burst_given) return;
  SHARDTOPK_EXPECTS(rate > 0, where, "burst=", burst, " without rate=R (a burst is the allowance of a rate limit)");
  SHARDTOPK_EXPECTS(std::isfinite(burst) && burst >= 1 && burst <= kMaxRate && burst == std::floor(burst), where,
                    "burst=", burst, " out of range (allowed: a whole number of requests, 1 .. 1000000)");
}

// A rate limit's allowance when only the rate is given: one second's worth, at least 1.
double default_burst(double rate) { return rate > 0 ? std::max(1.0, std::ceil(rate)) : 0; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

const char* to_string(Role r) {
  switch (r) {
    case Role::kNone: return "none";
    case Role::kRead: return "read";
    case Role::kWrite: return "write";
    case Role::kAdmin: return "admin";
  }
  return "?";
}

Sha256 sha256(const void* data, std::size_t n) {
  Sha256 d{};
  const int rc = gnutls_hash_fast(GNUTLS_DIG_SHA256, data, n, d.data());
  SHARDTOPK_ASSERT(rc == 0, "gnutls_hash_fast(SHA-256): ", gnutls_strerror(rc));
  return d;
}

std::string to_hex(const Sha256& d) {
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (std::size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  return out;
}

bool equal_digests(const Sha256& a, const Sha256& b) {
  // Every byte is visited and the differences OR-ed: no early exit on the first mismatch.
  volatile std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = static_cast<std::uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

std::vector<KeySpec> parse_key_specs(const std::string& text, const std::string& source) {
  SHARDTOPK_EXPECTS(text.find('\0') == std::string::npos, source, ": holds a NUL byte (not a text file)");
  std::vector<KeySpec> out;
  std::map<std::string, int> names, digests;
  std::istringstream in(text);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    const std::string where = source + ":" + std::to_string(line) + ": ";
    const std::string content = raw.substr(0, raw.find('#'));
    std::vector<std::string> f;
    std::istringstream words(content);
    for (std::string w; words >> w;) f.push_back(w);  // spaces, tabs, a trailing '\r'
    if (f.empty()) continue;
    SHARDTOPK_EXPECTS(f.size() >= 3, where, "expected NAME ROLE SHA256 [rate=R] [burst=B], got '", content, "'");
    KeySpec k;
    k.line = line;
    k.name = f[0];
    check_name(k.name, where);
    k.role = parse_role(f[1], where);
    const std::string& hex = f[2];
    bool ok = hex.size() == 64;
    for (std::size_t i = 0; ok && i < 32; ++i) {
      const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      if (ok) k.digest[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    SHARDTOPK_EXPECTS(ok, where, "SHA256 '", hex.size() > 80 ? hex.substr(0, 80) + "..." : hex,
                      "' is not 64 lowercase hex digits (the SHA-256 of the key: printf %s \"$KEY\" | sha256sum)");
    bool rate_given = false, burst_given = false;
    for (std::size_t i = 3; i < f.size(); ++i) {
      const std::size_t eq = f[i].find('=');
      const std::string opt = eq == std::string::npos ? f[i] : f[i].substr(0, eq);
      const std::string val = eq == std::string::npos ? "" : f[i].substr(eq + 1);
      if (opt == "rate" && eq != std::string::npos) {
        SHARDTOPK_EXPECTS(!rate_given, where, "rate given twice");
        rate_given = true;
        k.rate = parse_number(val, where + "rate");
        SHARDTOPK_EXPECTS(k.rate > 0, where, "rate=", val, " out of range (allowed: 0 < rate <= 1000000 requests per second)");
      } else if (opt == "burst" && eq != std::string::npos) {
        SHARDTOPK_EXPECTS(!burst_given, where, "burst given twice");
        burst_given = true;
        k.burst = parse_number(val, where + "burst");
      } else {
        throw Error(where + "unknown option '" + f[i] + "' (allowed: rate=R, burst=B)");
      }
    }
    check_limits(k.rate, k.burst, burst_given, where);
    if (!burst_given) k.burst = default_burst(k.rate);
    const auto n = names.emplace(k.name, line);
    SHARDTOPK_EXPECTS(n.second, where, "key name '", k.name, "' given twice (lines ", n.first->second, " and ", line,
                      "); names must be unique (the audit log names keys by them)");
    const auto d = digests.emplace(to_hex(k.digest), line);
    SHARDTOPK_EXPECTS(d.second, where, "the SHA256 of key '", k.name, "' is also line ", d.first->second,
                      "'s: one key under two names could not be told apart");
    out.push_back(k);
  }
  return out;
}

std::string generate_key() {
  unsigned char raw[32];
  const int rc = gnutls_rnd(GNUTLS_RND_KEY, raw, sizeof raw);
  SHARDTOPK_EXPECTS(rc == 0, "cannot generate a key: gnutls_rnd: ", gnutls_strerror(rc));
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out = "stk_";
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : raw) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += b64[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += b64[(acc << (6 - bits)) & 63];
  std::memset(raw, 0, sizeof raw);
  return out;
}

std::string key_line(const std::string& name, const std::string& role, const std::string& key, double rate,
                     double burst) {
  check_name(name, "");
  (void)parse_role(role, "");
  check_limits(rate, burst, burst > 0, "");
  std::string line = name + " " + role + " " + to_hex(sha256(key.data(), key.size()));
  if (rate > 0) {
    std::ostringstream os;
    os << " rate=" << rate << " burst=" << (burst > 0 ? burst : default_burst(rate));
    line += os.str();
  }
  return line;
}

}  // namespace shardtopk::service
