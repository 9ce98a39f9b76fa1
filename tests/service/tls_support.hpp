#pragma once
// Certificates for the TLS tests, made by GnuTLS's certtool (Debian gnutls-bin) into a folder:
// a CA, a server certificate it signed for localhost / 127.0.0.1, one that expired in 2020, and
// a key that belongs to neither. ECDSA P-256 keys: each takes milliseconds to make.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "test_support.hpp"

namespace shardtopk::test {

struct TestPki {
  std::string ca_pem;        ///< the CA's certificate (what clients trust)
  std::string cert_pem;      ///< the server's certificate, valid from now for 365 days
  std::string key_pem;       ///< its key
  std::string expired_pem;   ///< a server certificate of the same key, valid only in January 2020
  std::string other_key_pem; ///< a key no certificate belongs to
};

/// Whether certtool can be run here.
inline bool have_certtool() { return std::system("certtool --version >/dev/null 2>&1") == 0; }

/// Makes the files in `dir`. @throws std::runtime_error when certtool fails.
inline TestPki make_test_pki(const std::string& dir) {
  auto run = [](const std::string& cmd) {
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  };
  auto key = [&](const std::string& path) {
    run("certtool --generate-privkey --key-type ecdsa --no-text --outfile " + path);
  };
  TestPki p{dir + "/ca.pem", dir + "/server.pem", dir + "/server.key", dir + "/expired.pem", dir + "/other.key"};
  key(dir + "/ca.key");
  key(p.key_pem);
  key(p.other_key_pem);
  write_text(dir + "/ca.tmpl", "cn = \"shardtopk test CA\"\nca\ncert_signing_key\nexpiration_days = 400\n");
  run("certtool --generate-self-signed --no-text --load-privkey " + dir + "/ca.key --template " + dir +
      "/ca.tmpl --outfile " + p.ca_pem);
  const std::string server = "cn = \"localhost\"\ndns_name = \"localhost\"\nip_address = \"127.0.0.1\"\n"
                             "tls_www_server\nsigning_key\n";
  write_text(dir + "/server.tmpl", server + "expiration_days = 365\n");
  write_text(dir + "/expired.tmpl",
             server + "activation_date = \"2020-01-01 00:00:00\"\nexpiration_date = \"2020-02-01 00:00:00\"\n");
  for (const auto& [tmpl, out] : {std::pair<std::string, std::string>{"server", p.cert_pem}, {"expired", p.expired_pem}})
    run("certtool --generate-certificate --no-text --load-privkey " + p.key_pem + " --load-ca-certificate " +
        p.ca_pem + " --load-ca-privkey " + dir + "/ca.key --template " + dir + "/" + tmpl + ".tmpl --outfile " + out);
  return p;
}

}  // namespace shardtopk::test
