#!/usr/bin/env bash
# Packs the build dependencies that a bare GPU machine may lack (GoogleTest, nlohmann_json, zlib,
# libjpeg-turbo, libpng)
# from this Debian 12 x86-64 machine's packages into a relocatable CMake prefix, .gpu_deps/ in the
# repository root (git-ignored), so that it can travel with the working tree to a machine where
# nothing can be installed (bench/README.md, "On a GPU machine without network access").
# bench/gpu_check.sh uses the prefix by itself when it is there.
#
# Layout (the packages' own CMake files, whose paths are relative to where they lie):
#   include/{gtest,gmock,nlohmann,zlib.h,zconf.h,jpeglib.h,jerror.h,jmorecfg.h,jconfig.h,
#            png.h,pngconf.h,pnglibconf.h}
#   lib/x86_64-linux-gnu/libg{test,mock}{,_main}.a   lib/x86_64-linux-gnu/cmake/GTest/
#   share/cmake/nlohmann_json/
#   lib/libz.so, lib/libz.so.1   Debian's libz.a is not position-independent, so it cannot go into
#                                libspire.so: the shared library is packed instead (soname
#                                libz.so.1, which any Linux has; the copy serves where none is).
#   lib/libjpeg.so, lib/libjpeg.so.62, lib/libpng.so, lib/libpng16.so.16   the same way (the image
#                                decoders of train/image_io.cc; sonames libjpeg.so.62, libpng16.so.16).
#
# Usage: scripts/pack_gpu_deps.sh [PREFIX]   (default: <repo>/.gpu_deps; replaced if it exists)
# Needs: libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev libjpeg-dev libpng-dev (Debian/Ubuntu).
# Prints the prefix's size and the cmake arguments that use it, then checks with a throwaway
# CMake project that the three packages resolve inside the prefix.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${1:-$REPO/.gpu_deps}"
MULTIARCH="x86_64-linux-gnu"
SYSLIB="/usr/lib/$MULTIARCH"

die() { echo "pack_gpu_deps: $*" >&2; exit 1; }

[[ "$(uname -m)" == x86_64 ]] || die "this machine is $(uname -m); the GPU machine is x86-64"
for f in /usr/include/gtest/gtest.h /usr/include/gmock/gmock.h "$SYSLIB/libgtest.a" \
         "$SYSLIB/libgtest_main.a" "$SYSLIB/libgmock.a" "$SYSLIB/libgmock_main.a" \
         "$SYSLIB/cmake/GTest/GTestConfig.cmake" /usr/include/nlohmann/json.hpp \
         /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake /usr/include/zlib.h \
         /usr/include/zconf.h "$SYSLIB/libz.so.1" /usr/include/jpeglib.h /usr/include/jerror.h \
         /usr/include/jmorecfg.h "/usr/include/$MULTIARCH/jconfig.h" "$SYSLIB/libjpeg.so.62" \
         /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$SYSLIB/libpng16.so.16"; do
  [[ -e "$f" ]] || die "$f is missing (apt-get install libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev libjpeg-dev libpng-dev)"
done

rm -rf "$PREFIX"
mkdir -p "$PREFIX/include" "$PREFIX/lib/$MULTIARCH/cmake" "$PREFIX/share/cmake"

# GoogleTest: GTestTargets.cmake takes its prefix as four directories above itself
# (lib/x86_64-linux-gnu/cmake/GTest) and names lib/x86_64-linux-gnu/libgtest.a and include/.
# GTestConfig.cmake includes GMockTargets.cmake when it is there, whose libraries must then exist.
cp -r /usr/include/gtest /usr/include/gmock "$PREFIX/include/"
cp "$SYSLIB"/libgtest.a "$SYSLIB"/libgtest_main.a "$SYSLIB"/libgmock.a "$SYSLIB"/libgmock_main.a \
   "$PREFIX/lib/$MULTIARCH/"
cp -r "$SYSLIB/cmake/GTest" "$PREFIX/lib/$MULTIARCH/cmake/"

# nlohmann_json: nlohmann_jsonTargets.cmake takes its prefix as three directories above itself
# (share/cmake/nlohmann_json) and names include/.
cp -r /usr/include/nlohmann "$PREFIX/include/"
cp -r /usr/share/cmake/nlohmann_json "$PREFIX/share/cmake/"

# zlib: FindZLIB searches ZLIB_ROOT's include/ and lib/ first. Real files, not links.
cp /usr/include/zlib.h /usr/include/zconf.h "$PREFIX/include/"
cp -L "$SYSLIB/libz.so.1" "$PREFIX/lib/libz.so"
cp -L "$SYSLIB/libz.so.1" "$PREFIX/lib/libz.so.1"

# libjpeg-turbo and libpng: FindJPEG and FindPNG take JPEG_INCLUDE_DIR/JPEG_LIBRARY and
# PNG_PNG_INCLUDE_DIR/PNG_LIBRARY. Debian keeps jconfig.h in the multiarch folder; beside
# jpeglib.h it is found first. The shared libraries, as for zlib (libpng needs libz.so.1).
cp /usr/include/jpeglib.h /usr/include/jerror.h /usr/include/jmorecfg.h \
   "/usr/include/$MULTIARCH/jconfig.h" "$PREFIX/include/"
cp -L /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$PREFIX/include/"
cp -L "$SYSLIB/libjpeg.so.62" "$PREFIX/lib/libjpeg.so"
cp -L "$SYSLIB/libjpeg.so.62" "$PREFIX/lib/libjpeg.so.62"
cp -L "$SYSLIB/libpng16.so.16" "$PREFIX/lib/libpng.so"
cp -L "$SYSLIB/libpng16.so.16" "$PREFIX/lib/libpng16.so.16"

# The CMake files must not name this machine's /usr (the "/usr move" check compares the real
# path of its own folder with the original one, which cannot match inside the prefix).
if grep -rlE '"/usr/(include|lib/x86_64-linux-gnu/lib|share/cmake)' "$PREFIX/lib/$MULTIARCH/cmake" \
     "$PREFIX/share/cmake" | grep -q .; then
  die "a packed CMake file names an absolute /usr path; check $PREFIX"
fi

cat >"$PREFIX/README.txt" <<EOF
Made by scripts/pack_gpu_deps.sh on $(date -u '+%Y-%m-%d') from Debian packages:
$(dpkg-query -W -f='  ${Package} ${Version}\n' libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev 2>/dev/null || true)
Use: cmake ... -DCMAKE_PREFIX_PATH=<this folder> -DZLIB_ROOT=<this folder> (and the JPEG_/PNG_ paths:
bench/gpu_check.sh passes them all)
EOF

CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$PREFIX -DZLIB_ROOT=$PREFIX -DZLIB_INCLUDE_DIR=$PREFIX/include -DZLIB_LIBRARY=$PREFIX/lib/libz.so"
CMAKE_ARGS+=" -DJPEG_INCLUDE_DIR=$PREFIX/include -DJPEG_LIBRARY=$PREFIX/lib/libjpeg.so"
CMAKE_ARGS+=" -DPNG_PNG_INCLUDE_DIR=$PREFIX/include -DPNG_LIBRARY=$PREFIX/lib/libpng.so"
echo "pack_gpu_deps: packed $PREFIX: $(du -sh "$PREFIX" | cut -f1) ($(du -sb "$PREFIX" | cut -f1) bytes)"
echo "pack_gpu_deps: cmake arguments (bench/gpu_check.sh adds them by itself, with the prefix where it lies):"
echo "  $CMAKE_ARGS"

# ---- check: a throwaway project finds the three packages inside the prefix ------------------
if ! command -v cmake >/dev/null 2>&1; then
  echo "pack_gpu_deps: cmake not found: the prefix was not checked"
  exit 0
fi
CHECK="$(mktemp -d "${TMPDIR:-/tmp}/pack_gpu_deps.XXXXXX")"
trap 'rm -rf "$CHECK"' EXIT
cat >"$CHECK/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(pack_check LANGUAGES CXX)
find_package(GTest REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
get_target_property(gtest_lib GTest::gtest IMPORTED_LOCATION_NONE)
get_target_property(json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
foreach(p "${GTest_DIR}" "${gtest_lib}" "${nlohmann_json_DIR}" "${json_inc}" "${ZLIB_INCLUDE_DIRS}" "${ZLIB_LIBRARIES}"
        "${JPEG_INCLUDE_DIRS}" "${JPEG_LIBRARIES}" ${PNG_INCLUDE_DIRS} ${PNG_LIBRARIES})
  string(FIND "${p}" "${DEPS}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "not inside ${DEPS}: ${p}")
  endif()
endforeach()
add_executable(pack_check main.cc)
target_link_libraries(pack_check PRIVATE GTest::gtest_main nlohmann_json::nlohmann_json ZLIB::ZLIB JPEG::JPEG PNG::PNG)
EOF
cat >"$CHECK/main.cc" <<'EOF'
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>
#include <cstdio>
#include <jpeglib.h>
#include <png.h>
TEST(PackCheck, Works) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  EXPECT_GE(png_access_version_number(), 10600u);
  EXPECT_EQ(nlohmann::json::parse("{\"a\": 2}")["a"], 2);
  EXPECT_EQ(crc32(0, reinterpret_cast<const Bytef*>("abc"), 3), 0x352441c2u);
}
EOF
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words without spaces
if cmake -S "$CHECK" -B "$CHECK/build" -DDEPS="$PREFIX" $CMAKE_ARGS >"$CHECK/log" 2>&1 &&
   cmake --build "$CHECK/build" >>"$CHECK/log" 2>&1 &&
   "$CHECK/build/pack_check" --gtest_brief=1 >>"$CHECK/log" 2>&1; then
  echo "pack_gpu_deps: checked: a test project found GTest, nlohmann_json, ZLIB, JPEG and PNG in the prefix, built and ran"
else
  tail -20 "$CHECK/log" >&2
  die "the check project failed (log above)"
fi
