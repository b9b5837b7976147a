// Error type of the library: every user-facing failure (bad shapes, missing
// feeds, unknown ops, corrupt files, CUDA errors) is reported by throwing
// spire::Error with a message naming the op, node, shapes and dtypes involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace spire {

/// The single exception type thrown by Spire for user errors.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// An error every process of a multi-process job raises alike (they disagree on a
/// collective or on a list they compare), so no process failed: a distributed trainer does
/// not announce it as a failure. Code that adds context to an error keeps this type
/// (rethrow it as a DisagreementError with the longer message).
class DisagreementError : public Error {
 public:
  explicit DisagreementError(const std::string& what) : Error(what) {}
};

/// Throws an error of e's kind (DisagreementError or Error) with `message`.
[[noreturn]] inline void throw_like(const std::exception& e, const std::string& message) {
  if (dynamic_cast<const DisagreementError*>(&e)) throw DisagreementError(message);
  throw Error(message);
}

namespace detail {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/// Concatenates the streamable arguments into one string.
template <typename... Args>
std::string str_cat(Args&&... args) {
  return detail::str_cat(std::forward<Args>(args)...);
}

/// Throws spire::Error with the concatenated message.
template <typename... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw Error(detail::str_cat(std::forward<Args>(args)...));
}

}  // namespace spire

/// Throws spire::Error(message) when `cond` is false. The message arguments
/// are only evaluated on failure.
#define SPIRE_CHECK(cond, ...)                   \
  do {                                           \
    if (!(cond)) ::spire::throw_error(__VA_ARGS__); \
  } while (0)

/// Internal invariant check (a bug in Spire, not a user error): throws with
/// file and line.
#define SPIRE_INTERNAL_CHECK(cond)                                              \
  do {                                                                          \
    if (!(cond))                                                                \
      ::spire::throw_error("internal error: ", #cond, " failed at ", __FILE__, \
                           ":", __LINE__);                                      \
  } while (0)

#define SPIRE_CONCAT_INNER(a, b) a##b
#define SPIRE_CONCAT(a, b) SPIRE_CONCAT_INNER(a, b)

/// Runs the following block once at load time (used for registrations):
///   SPIRE_STATIC_INIT(my_kernels) { KernelRegistry::global().add(...); }
#define SPIRE_STATIC_INIT(tag)                                                          \
  static void spire_static_init_##tag();                                                \
  static const bool spire_static_init_done_##tag [[maybe_unused]] =                     \
      (spire_static_init_##tag(), true);                                                \
  static void spire_static_init_##tag()
