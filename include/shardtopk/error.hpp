#pragma once
/// @file error.hpp
/// Error type and checking macros.
///
/// User-facing problems (bad config, bad input file, bad query) throw `shardtopk::Error` with a
/// message that names the offending key, value, row or query. Broken internal invariants throw
/// `shardtopk::InternalError` (never `abort()`: in a service that would kill every rank).

#include <sstream>
#include <stdexcept>
#include <string>

namespace shardtopk {

/// A user-facing error: the message says what was wrong and with which value.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A broken internal invariant (a bug in shardtopk, not in the input).
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace shardtopk

/// Throws shardtopk::Error with the streamed message when `cond` is false (user input checks).
#define SHARDTOPK_EXPECTS(cond, ...)                                        \
  do {                                                                      \
    if (!(cond)) throw ::shardtopk::Error(::shardtopk::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws shardtopk::InternalError naming the condition and file:line (internal invariants).
#define SHARDTOPK_ASSERT(cond, ...)                                                        \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::shardtopk::InternalError(::shardtopk::detail::concat(                        \
          "internal error: ", #cond, " failed at ", __FILE__, ":", __LINE__, ": ", ##__VA_ARGS__)); \
  } while (0)
