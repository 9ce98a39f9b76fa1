#include "service/tls.hpp"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "service/read_file.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

std::string read_file(const std::string& key, const std::string& path) {
  std::string bytes = read_regular_file(key, path).bytes;
  SHARDTOPK_EXPECTS(!bytes.empty(), key, " '", path, "' is empty");
  return bytes;
}

std::string utc_date(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

gnutls_datum_t datum(const std::string& s) {
  return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())), static_cast<unsigned>(s.size())};
}

std::string subject(gnutls_x509_crt_t crt) {
  gnutls_datum_t dn{};
  if (gnutls_x509_crt_get_dn3(crt, &dn, 0) != 0) return "?";
  std::string out(reinterpret_cast<const char*>(dn.data), dn.size);
  gnutls_free(dn.data);
  return out;
}

}  // namespace

TlsFiles load_tls_files(const std::string& cert_file, const std::string& key_file,
                        std::chrono::system_clock::time_point now_tp) {
  const std::string ck = "service.tls.cert_file '" + cert_file + "'", kk = "service.tls.key_file '" + key_file + "'";
  TlsFiles out;
  out.cert_pem = read_file("service.tls.cert_file", cert_file);
  out.key_pem = read_file("service.tls.key_file", key_file);
  const std::time_t now = std::chrono::system_clock::to_time_t(now_tp);

  // The chain: every certificate in it must be valid now (a client refuses the chain otherwise).
  gnutls_x509_crt_t* certs = nullptr;
  unsigned int n = 0;
  gnutls_datum_t cd = datum(out.cert_pem);
  int rc = gnutls_x509_crt_list_import2(&certs, &n, &cd, GNUTLS_X509_FMT_PEM, 0);
  SHARDTOPK_EXPECTS(rc >= 0 && n > 0, ck, ": no PEM certificate could be read from it (",
                    rc < 0 ? gnutls_strerror(rc) : "no '-----BEGIN CERTIFICATE-----' block", ")");
  std::string leaf;
  std::time_t leaf_expiry = 0;
  std::string problem;
  for (unsigned int i = 0; i < n; ++i) {
    const std::time_t from = gnutls_x509_crt_get_activation_time(certs[i]);
    const std::time_t until = gnutls_x509_crt_get_expiration_time(certs[i]);
    const std::string which = (i == 0 ? std::string("the certificate") : "certificate " + std::to_string(i + 1) +
                                                                             " of the chain") +
                              " (" + subject(certs[i]) + ")";
    if (i == 0) {
      leaf = subject(certs[i]);
      leaf_expiry = until;
    }
    if (problem.empty() && until != static_cast<std::time_t>(-1) && until < now)
      problem = which + " expired on " + utc_date(until) + "; renew it";
    if (problem.empty() && from != static_cast<std::time_t>(-1) && from > now)
      problem = which + " is not valid before " + utc_date(from) + " (is this machine's clock right?)";
  }
  for (unsigned int i = 0; i < n; ++i) gnutls_x509_crt_deinit(certs[i]);
  gnutls_free(certs);
  SHARDTOPK_EXPECTS(problem.empty(), ck, ": ", problem);

  // The key: a PEM private key, unencrypted, and the certificate's.
  SHARDTOPK_EXPECTS(out.key_pem.find("ENCRYPTED") == std::string::npos, kk,
                    ": the key is encrypted; give it unencrypted, readable by the service's user only "
                    "(certtool --load-privkey KEY --to-p8 --empty-password, or openssl pkey -in KEY)");
  gnutls_x509_privkey_t key = nullptr;
  gnutls_x509_privkey_init(&key);
  gnutls_datum_t kd = datum(out.key_pem);
  rc = gnutls_x509_privkey_import2(key, &kd, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_x509_privkey_deinit(key);
  SHARDTOPK_EXPECTS(rc >= 0, kk, ": not a PEM private key (", gnutls_strerror(rc), ")");
  gnutls_certificate_credentials_t cred = nullptr;
  gnutls_certificate_allocate_credentials(&cred);
  rc = gnutls_certificate_set_x509_key_mem2(cred, &cd, &kd, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_certificate_free_credentials(cred);
  SHARDTOPK_EXPECTS(rc >= 0, kk, " does not go with ", ck, ": ",
                    rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH ? "the key is not the certificate's" : gnutls_strerror(rc));

  gnutls_priority_t prio = nullptr;
  const char* err = nullptr;
  rc = gnutls_priority_init(&prio, kTlsPriorities, &err);
  SHARDTOPK_ASSERT(rc == 0, "GnuTLS refuses the priorities '", kTlsPriorities, "' at '", err ? err : "?", "'");
  gnutls_priority_deinit(prio);

  if (leaf_expiry != static_cast<std::time_t>(-1) && leaf_expiry - now < 30 * 86400)
    out.warnings.push_back(ck + ": the certificate expires on " + utc_date(leaf_expiry) + ", in less than 30 days");
  struct stat st{};
  if (::stat(key_file.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
    out.warnings.push_back(kk + " is readable by its group or by others (chmod 600)");
  out.summary = "TLS 1.2/1.3, certificate " + leaf + " valid until " + utc_date(leaf_expiry);
  return out;
}

}  // namespace shardtopk::service
