// Enums spelled as strings at the command-line and config boundary (a
// trainer's mode, a layer's option): each enum has one table of spellings,
// the first spelling of a value being its name, and one parse function over
// it (parse_enum) that accepts every spelling and throws spire::Error
// listing them for any other string.
#pragma once

#include <string>

#include "core/error.h"

namespace spire {

/// One accepted spelling of an enum value.
template <typename E>
struct EnumSpelling {
  const char* spelling;
  E value;
};

/// The value spelled `name` in `table`; throws spire::Error "<who>: unknown
/// <option> '<name>' (accepted: ...)" for a spelling the table lacks.
template <typename E, size_t N>
E parse_enum(const EnumSpelling<E> (&table)[N], const std::string& name, const char* who, const char* option) {
  for (const EnumSpelling<E>& s : table)
    if (name == s.spelling) return s.value;
  std::string accepted;
  for (const EnumSpelling<E>& s : table)
    accepted += str_cat(accepted.empty() ? "" : ", ", *s.spelling ? s.spelling : "\"\"");
  throw_error(who, ": unknown ", option, " '", name, "' (accepted: ", accepted, ")");
}

/// The name of `value`: its first spelling in `table` ("?" when it has none).
template <typename E, size_t N>
const char* enum_name(const EnumSpelling<E> (&table)[N], E value) {
  for (const EnumSpelling<E>& s : table)
    if (s.value == value) return s.spelling;
  return "?";
}

}  // namespace spire
