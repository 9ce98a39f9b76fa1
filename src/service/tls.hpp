#pragma once
// HTTPS for the front end: the certificate and key files (service.tls.*), read and checked once
// at start-up so that a bad file stops the service with its name and the reason, before
// libmicrohttpd (which does the TLS itself, over GnuTLS) would refuse it with a bare "failed".
#include <chrono>
#include <string>
#include <vector>

namespace shardtopk::service {

/// GnuTLS priorities of the front end: its default cipher suites, TLS 1.3 and 1.2 only.
inline constexpr const char* kTlsPriorities = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";

struct TlsFiles {
  std::string cert_pem;  ///< the certificate chain, as read
  std::string key_pem;   ///< its private key, as read
  std::string summary;   ///< for the start-up log: subject, expiry, protocol versions
  std::vector<std::string> warnings;  ///< expiring within 30 days; a key file readable by others
};

/// Reads and checks the PEM certificate chain and private key at `now`.
/// @throws Error naming the file: unreadable; no PEM certificate in it; a certificate that has
///   expired or is not valid yet; a key that is not a PEM private key, is encrypted, or does not
///   belong to the certificate.
TlsFiles load_tls_files(const std::string& cert_file, const std::string& key_file,
                        std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

}  // namespace shardtopk::service
