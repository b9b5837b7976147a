# Installs Spire's headers (run by `cmake --install`, see CMakeLists.txt):
# <layer>/**/*.h to <prefix>/<SPIRE_INCLUDE_DEST>/spire/<layer>/, and spire.h
# to <prefix>/<SPIRE_INCLUDE_DEST>/spire.h. The sources name each other by
# short paths ("core/graph.h"); the installed copies say "spire/core/graph.h",
# so a user's include path holds <prefix>/include only and no folder of
# Spire's can shadow (or be shadowed by) a user's own.
# Inputs: SPIRE_SOURCE_DIR, SPIRE_INCLUDE_DEST.
set(_layers core kernels autograd layers train dist)
if(IS_ABSOLUTE "${SPIRE_INCLUDE_DEST}")
  set(_root "$ENV{DESTDIR}${SPIRE_INCLUDE_DEST}")
else()
  set(_root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${SPIRE_INCLUDE_DEST}")
endif()
string(REPLACE ";" "|" _alt "${_layers}")

function(_spire_install_header src dest)
  file(READ "${src}" text)
  # (scripts/check_layers.py allows Spire's headers only as #include "layer/...".)
  string(REGEX REPLACE "#([ \t]*)include([ \t]*)\"(${_alt})/" "#\\1include\\2\"spire/\\3/" text "${text}")
  # In install_manifest.txt, as install() would list it.
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${dest}")
  set(CMAKE_INSTALL_MANIFEST_FILES "${CMAKE_INSTALL_MANIFEST_FILES}" PARENT_SCOPE)
  get_filename_component(dir "${dest}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  # Unchanged headers keep their time stamp (a user's build does not redo its work).
  if(EXISTS "${dest}")
    file(READ "${dest}" old)
    if(old STREQUAL text)
      message(STATUS "Up-to-date: ${dest}")
      return()
    endif()
  endif()
  message(STATUS "Installing: ${dest}")
  file(WRITE "${dest}" "${text}")
endfunction()

foreach(layer ${_layers})
  file(GLOB_RECURSE headers RELATIVE "${SPIRE_SOURCE_DIR}" "${SPIRE_SOURCE_DIR}/${layer}/*.h")
  foreach(h ${headers})
    _spire_install_header("${SPIRE_SOURCE_DIR}/${h}" "${_root}/spire/${h}")
  endforeach()
endforeach()
_spire_install_header("${SPIRE_SOURCE_DIR}/spire.h" "${_root}/spire.h")
