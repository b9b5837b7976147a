// Helpers of the libFuzzer targets: a scratch directory per fuzzing process
// (removed at exit) and writing the input to a file there, since Spire's
// readers take paths. A target returns normally for inputs Spire rejects with
// spire::Error; anything else (a crash, a sanitizer report, another
// exception, memory beyond libFuzzer's limit) is a finding.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace spire::fuzz {

/// This process's scratch directory.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "spire_fuzz_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();  // no scratch space: the fuzzer cannot run at all
    static struct Remove {
      std::string d;
      ~Remove() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } remove{tmpl};
    return tmpl;
  }();
  return dir;
}

/// Writes `size` bytes to `<scratch>/<name>` and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace spire::fuzz
