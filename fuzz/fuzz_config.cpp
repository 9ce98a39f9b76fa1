// libFuzzer target: the YAML config loader (parse_config, apply_override, validate, to_yaml).
// Input: YAML text; its last line, when it contains '=', is also applied as a --set override.
// Contract checked: bad input throws shardtopk::Error and nothing else (no crash, no other
// exception type, no sanitizer report); a config that parses and validates renders to YAML that
// parses back to the same YAML (round trip).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardtopk;
  if (size > 1 << 16) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Config cfg;
  try {
    cfg = parse_config(text, "<fuzz>");
  } catch (const Error&) {
    return 0;
  }
  const auto nl = text.find_last_of('\n');
  const std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  try {
    if (last.find('=') != std::string::npos) apply_override(cfg, last);
    validate(cfg);
  } catch (const Error&) {
    return 0;  // to_yaml is for valid configs (logs, result attributes): round trip those only
  }
  const std::string yaml = to_yaml(cfg);
  try {
    const std::string again = to_yaml(parse_config(yaml, "<round trip>"));
    if (again != yaml) {
      std::fprintf(stderr, "round trip changed the config:\n%s\n----\n%s\n", yaml.c_str(), again.c_str());
      std::abort();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "to_yaml wrote YAML that does not parse back: %s\n%s\n", e.what(), yaml.c_str());
    std::abort();
  }
  return 0;
}
