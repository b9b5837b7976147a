# Installs Spire's headers (run by `cmake --install`, see CMakeLists.txt):
# <layer>/**/*.h to <prefix>/<SPIRE_INCLUDE_DEST>/spire/<layer>/, and spire.h
# to <prefix>/<SPIRE_INCLUDE_DEST>/spire.h. The sources name each other by
# short paths ("core/graph.h"); the installed copies say "spire/core/graph.h",
# so a user's include path holds <prefix>/include only and no folder of
# Spire's can shadow (or be shadowed by) a user's own.
# Inputs: SPIRE_SOURCE_DIR, SPIRE_INCLUDE_DEST.
set(_layers core kernels autograd layers train dist)
set(_root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${SPIRE_INCLUDE_DEST}")
string(REPLACE ";" "|" _alt "${_layers}")

function(_spire_install_header src dest)
  file(READ "${src}" text)
  string(REGEX REPLACE "#include \"(${_alt})/" "#include \"spire/\\1/" text "${text}")
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
