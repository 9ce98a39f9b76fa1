#include "service/exposure.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "shardtopk/error.hpp"

namespace shardtopk::service {

bool host_is_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &res) != 0 || !res) return false;
  bool all = true;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    bool lo = false;
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      lo = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      const unsigned char* b = in6->sin6_addr.s6_addr;
      static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      lo = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || (std::memcmp(b, mapped, 12) == 0 && b[12] == 127);
    }
    all = all && lo;
  }
  freeaddrinfo(res);
  return all;
}

void check_exposure(const Config& cfg, bool loopback) {
  const ServiceConfig& s = cfg.service;
  if (loopback || cfg.storage.dir.empty() || !s.auth_keys_file.empty() || s.auth_allow_open_writes) return;
  throw Error("service.host '" + s.host + "' is not a loopback address and the service takes writes (storage.dir '" +
              cfg.storage.dir + "') without API keys: anyone who can reach the port could change or erase the index. "
              "Add keys: `shardtopk keygen --name NAME --role write` (or --role admin) prints a key and its line; put "
              "the lines in a file and set service.auth.keys_file to it. Or listen on 127.0.0.1, or set "
              "service.auth.allow_open_writes: true to take writes from anyone anyway");
}

std::vector<std::string> exposure_warnings(const Config& cfg, bool loopback) {
  std::vector<std::string> out;
  const ServiceConfig& s = cfg.service;
  if (loopback) return out;
  const std::string where = "service.host '" + s.host + "' is not a loopback address: ";
  if (!s.auth_keys_file.empty() && s.tls_cert_file.empty())
    out.push_back(where + "API keys travel in clear text (set service.tls.cert_file and service.tls.key_file)");
  if (s.auth_keys_file.empty() && !cfg.storage.dir.empty())
    out.push_back(where + "writes are open to anyone who can reach the port (service.auth.allow_open_writes)");
  else if (s.auth_keys_file.empty())
    out.push_back(where + "searches are open to anyone who can reach the port (no service.auth.keys_file)");
  return out;
}

}  // namespace shardtopk::service
