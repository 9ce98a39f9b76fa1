// `shardtopk keygen --name N --role R [--rate R --burst B]`: a new API key for
// service.auth.keys_file. The key is printed once and kept nowhere: the keys file takes only its
// line (NAME ROLE SHA256 ...), which holds the key's SHA-256, not the key.
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "service/api_keys.hpp"

namespace shardtopk::cli {

int run_keygen(const KeygenArgs& a) {
  const std::string key = service::generate_key();
  const std::string line = service::key_line(a.name, a.role, key, a.rate, a.burst);  // checks name, role, limits
  std::printf("# the key (shown once, stored nowhere: hand it to its client, which sends 'Authorization: Bearer KEY'):\n"
              "%s\n"
              "# its line for service.auth.keys_file (append it, then SIGHUP rank 0 or restart):\n"
              "%s\n",
              key.c_str(), line.c_str());
  return 0;
}

}  // namespace shardtopk::cli
