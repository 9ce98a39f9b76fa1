#pragma once
// The keys in force (service.auth.keys_file) and the decision for one request: which key sent
// it (`Authorization: Bearer KEY`), whether its role is high enough for the route, and whether
// its rate limit admits it now. Reloaded on SIGHUP without stopping anything: requests decided
// before the reload keep the old keys, later ones see the new ones; a file that does not parse
// leaves the old keys in force.
//
// Hot path: one SHA-256 of the presented key, a constant-time comparison with every key's digest,
// and the key's own rate limiter (one atomic word). The keys are read through a per-thread
// reference to the current set, refreshed when the set's version changes: no lock is taken unless
// a reload happened since the thread's last request.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "service/api_keys.hpp"
#include "service/rate_limiter.hpp"

namespace shardtopk::service {

/// The decision for one request.
struct Access {
  int status = 200;          ///< 200 allowed; 401 no or unknown key; 403 role too low; 429 over the rate limit
  std::string key;           ///< the key's name; "" when no key matched
  Role role = Role::kNone;   ///< the key's role
  std::string message;       ///< why it was refused (for the reply and the audit log)
  std::string token_prefix;  ///< 401 for an unknown key: the first 8 hex digits of its SHA-256 (audit only)
  int retry_after_s = 0;     ///< 429: seconds until the key's next request would be admitted (≥ 1)
};

class KeyRing {
 public:
  /// Reads the keys file. @throws Error naming the file (unreadable) or its line (bad content).
  explicit KeyRing(std::string path);
  ~KeyRing();
  KeyRing(const KeyRing&) = delete;
  KeyRing& operator=(const KeyRing&) = delete;

  /// Decides a request that needs `needed` (Role::kNone: allowed without a key).
  /// `authorization`: the Authorization header's value, nullptr when absent; `headers`: how many
  /// Authorization headers the request had (more than one is refused). `now_ns`: a monotonic clock.
  /// Any thread.
  Access check(const char* authorization, int headers, Role needed, std::int64_t now_ns) const;

  /// Re-reads the file. True when its keys are now in force (`message` says how many); false when
  /// it could not be read or parsed (`message` says why; the previous keys stay in force). A key
  /// that keeps its name, digest and limits keeps its rate limiter's state.
  bool reload(std::string* message);

  std::size_t size() const;
  const std::string& path() const { return path_; }
  /// Start-up notes about the file (group- or world-writable), empty when none.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Entry {
    KeySpec spec;
    std::shared_ptr<RateLimiter> limiter;  // null: not limited; shared with the next set when unchanged
  };
  struct Set {
    std::vector<Entry> keys;
  };
  std::shared_ptr<const Set> read(std::vector<std::string>* warnings) const;
  const Set& current() const;

  const std::string path_;
  const std::uint64_t id_;  // distinguishes rings in the per-thread cache (addresses are reused)
  std::vector<std::string> warnings_;
  std::atomic<std::uint64_t> version_{1};
  mutable std::mutex m_;              // set_ (reload, per-thread refresh)
  std::shared_ptr<const Set> set_;
};

}  // namespace shardtopk::service
