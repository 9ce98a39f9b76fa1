#pragma once
// API keys and roles (service.auth.keys_file): the file format, the key's digest and new keys.
//
// The keys file holds one key per line, `NAME ROLE SHA256 [rate=R] [burst=B]`, `#` starting a
// comment. SHA256 is the lowercase hex SHA-256 of the key's text (`printf %s "$KEY" | sha256sum`):
// the file holds no key, so a copy of it gives nobody access. Roles are ordered: read (search,
// info, metrics) < write (read + upsert, delete) < admin (write + snapshot).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace shardtopk::service {

enum class Role : int { kNone = 0, kRead = 1, kWrite = 2, kAdmin = 3 };

/// "none", "read", "write", "admin".
const char* to_string(Role r);

using Sha256 = std::array<std::uint8_t, 32>;

/// SHA-256 of `n` bytes (GnuTLS).
Sha256 sha256(const void* data, std::size_t n);
std::string to_hex(const Sha256& d);

/// Compares two digests in time that does not depend on where they differ.
bool equal_digests(const Sha256& a, const Sha256& b);

/// One line of a keys file.
struct KeySpec {
  std::string name;   ///< [A-Za-z0-9._-], 1 .. 64 characters; unique in its file (the audit log names it)
  Role role = Role::kRead;
  Sha256 digest{};    ///< SHA-256 of the key's text; unique in its file
  double rate = 0;    ///< requests per second; 0: not limited
  double burst = 0;   ///< requests allowed at once (≥ 1) when rate > 0
  int line = 0;       ///< line in the file, for messages
};

/// Parses a keys file's text; `source` names it in messages. An empty file (or comments only)
/// gives no keys. @throws Error naming source:line, the field and what is allowed: an unknown
/// role, a digest that is not 64 lowercase hex digits, a bad name, a name or digest given twice,
/// an unknown, repeated or out-of-range option (rate 0 < R ≤ 1e6, burst 1 ≤ B ≤ 1e6, burst only
/// with rate).
std::vector<KeySpec> parse_key_specs(const std::string& text, const std::string& source);

/// A new key: "stk_" then 32 bytes from GnuTLS's key-grade random generator, base64url without
/// padding (47 characters). @throws Error when the generator fails.
std::string generate_key();

/// The keys-file line of `key`: "NAME ROLE SHA256[ rate=R burst=B]". @throws Error on a bad
/// name, role ("read", "write", "admin"), rate or burst (the checks of parse_key_specs).
std::string key_line(const std::string& name, const std::string& role, const std::string& key, double rate = 0,
                     double burst = 0);

}  // namespace shardtopk::service
