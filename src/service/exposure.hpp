#pragma once
// Secure by default: who can reach the service, and whether it may listen there as configured.
#include <string>
#include <vector>

#include "shardtopk/config.hpp"

namespace shardtopk::service {

/// Whether every address `host` resolves to (as `serve` binds it) is a loopback address
/// (127.0.0.0/8, ::1, an IPv4-mapped 127.x). "0.0.0.0", "::" and names that do not resolve: false.
bool host_is_loopback(const std::string& host);

/// Refuses a writable service (storage.dir set) that would listen beyond loopback without
/// service.auth.keys_file, unless service.auth.allow_open_writes is true. `loopback`: from
/// host_is_loopback. @throws Error saying how to add keys (or to listen on loopback).
void check_exposure(const Config& cfg, bool loopback);

/// What the start-up log should say about the exposure that is allowed: keys sent in clear text
/// beyond loopback, open searches or open writes beyond loopback. Empty on loopback.
std::vector<std::string> exposure_warnings(const Config& cfg, bool loopback);

}  // namespace shardtopk::service
