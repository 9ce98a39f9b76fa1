#include "service/key_ring.hpp"

#include <strings.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "service/read_file.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

std::atomic<std::uint64_t> g_next_ring{1};

// A presented key longer than this is refused without hashing it (keygen's are 47 characters).
constexpr std::size_t kMaxKeyBytes = 512;

std::string read_file(const std::string& path, std::vector<std::string>* warnings) {
  // A directory would read as no bytes, taken for an empty file that revokes every key.
  FileBytes f = read_regular_file("service.auth.keys_file", path);
  if (warnings && (f.mode & (S_IWGRP | S_IWOTH)))
    warnings->push_back("service.auth.keys_file '" + path +
                        "' is writable by its group or by others: whoever can write it can add keys (chmod 600 or 644)");
  // A UTF-8 byte order mark (some editors write one) is not part of the first key's name.
  if (f.bytes.compare(0, 3, "\xEF\xBB\xBF") == 0) f.bytes.erase(0, 3);
  return std::move(f.bytes);
}

bool same_limits(const KeySpec& a, const KeySpec& b) { return a.rate == b.rate && a.burst == b.burst; }

// Bearer credentials (RFC 6750): the scheme without regard to case, spaces, then the key, which
// is printable ASCII without spaces.
bool bearer_token(const char* h, std::string* token) {
  if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
  const char* p = h + 6;
  while (*p == ' ' || *p == '\t') ++p;
  const char* e = p;
  while (*e > 0x20 && *e < 0x7f) ++e;
  const char* end = e;
  while (*end == ' ' || *end == '\t') ++end;
  if (e == p || *end != '\0' || static_cast<std::size_t>(e - p) > kMaxKeyBytes) return false;
  token->assign(p, e);
  return true;
}

}  // namespace

KeyRing::KeyRing(std::string path) : path_(std::move(path)), id_(g_next_ring.fetch_add(1)) {
  set_ = read(&warnings_);
}

KeyRing::~KeyRing() = default;

std::shared_ptr<const KeyRing::Set> KeyRing::read(std::vector<std::string>* warnings) const {
  const std::vector<KeySpec> specs = parse_key_specs(read_file(path_, warnings), path_);
  auto s = std::make_shared<Set>();
  std::shared_ptr<const Set> old;
  {
    std::lock_guard<std::mutex> l(m_);
    old = set_;
  }
  for (const KeySpec& k : specs) {
    Entry e{k, nullptr};
    if (old)
      for (const Entry& o : old->keys)
        if (o.spec.name == k.name && equal_digests(o.spec.digest, k.digest) && same_limits(o.spec, k)) e.limiter = o.limiter;
    if (!e.limiter && k.rate > 0) e.limiter = std::make_shared<RateLimiter>(k.rate, k.burst);
    s->keys.push_back(std::move(e));
  }
  return s;
}

bool KeyRing::reload(std::string* message) {
  std::shared_ptr<const Set> next;
  try {
    next = read(nullptr);
  } catch (const Error& e) {
    if (message) *message = std::string(e.what()) + "; the previous " + std::to_string(size()) + " key(s) stay in force";
    return false;
  }
  const std::size_t n = next->keys.size();
  {
    std::lock_guard<std::mutex> l(m_);
    set_ = std::move(next);
    version_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (message) *message = "service.auth.keys_file '" + path_ + "' reloaded: " + std::to_string(n) + " key(s) in force";
  return true;
}

std::size_t KeyRing::size() const {
  std::lock_guard<std::mutex> l(m_);
  return set_->keys.size();
}

const KeyRing::Set& KeyRing::current() const {
  // The thread's reference keeps its set alive until the thread sees a newer version, so a set
  // is freed only when no thread can be reading it.
  struct Cache {
    std::uint64_t ring = 0, version = 0;
    std::shared_ptr<const Set> set;
  };
  thread_local Cache cache;
  const std::uint64_t v = version_.load(std::memory_order_acquire);
  if (cache.ring != id_ || cache.version != v || !cache.set) {
    std::lock_guard<std::mutex> l(m_);
    cache.ring = id_;
    cache.version = version_.load(std::memory_order_relaxed);
    cache.set = set_;
  }
  return *cache.set;
}

Access KeyRing::check(const char* authorization, int headers, Role needed, std::int64_t now_ns) const {
  Access a;
  if (needed == Role::kNone) return a;
  a.status = 401;
  if (headers > 1) {
    a.message = "Authorization given more than once";
    return a;
  }
  if (!authorization) {
    a.message = "this route needs an API key: send the header 'Authorization: Bearer KEY'";
    return a;
  }
  std::string token;
  if (!bearer_token(authorization, &token)) {
    a.message = "the Authorization header is not 'Bearer KEY'";
    return a;
  }
  const Sha256 d = sha256(token.data(), token.size());
  std::fill(token.begin(), token.end(), '\0');
  const Entry* found = nullptr;
  for (const Entry& e : current().keys)  // every digest is compared: the time does not say which matched
    if (equal_digests(e.spec.digest, d)) found = &e;
  if (!found) {
    a.message = "unknown API key";
    a.token_prefix = to_hex(d).substr(0, 8);
    return a;
  }
  a.key = found->spec.name;
  a.role = found->spec.role;
  if (found->spec.role < needed) {
    a.status = 403;
    a.message = "key '" + a.key + "' has role " + to_string(a.role) + "; this route needs role " + to_string(needed);
    return a;
  }
  if (found->limiter) {
    const std::int64_t wait_ns = found->limiter->take(now_ns);
    if (wait_ns > 0) {
      a.status = 429;
      a.retry_after_s = static_cast<int>(std::max<std::int64_t>(1, (wait_ns + 999999999) / 1000000000));
      std::ostringstream os;
      os << "key '" << a.key << "' is over its rate limit (" << found->spec.rate << " requests/s, burst "
         << found->spec.burst << "); retry after " << a.retry_after_s << " s";
      a.message = os.str();
      return a;
    }
  }
  a.status = 200;
  return a;
}

}  // namespace shardtopk::service
