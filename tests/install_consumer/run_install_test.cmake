# Installs the Spire build tree into a scratch prefix, then configures,
# builds and runs the consumer project against it with find_package(Spire).
# Inputs: SPIRE_BUILD_DIR, CONSUMER_SRC, WORK_DIR, CONSUMER_FLAGS (compile and
# link flags, e.g. the sanitizers the library was built with), CONSUMER_CXX
# (the compiler the library was built with: a sanitizer's runtime must match).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run_step)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run_step(${CMAKE_COMMAND} --install ${SPIRE_BUILD_DIR} --prefix ${prefix})
run_step(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK_DIR}/build
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CONSUMER_CXX}
         "-DCMAKE_CXX_FLAGS=${CONSUMER_FLAGS}"
         # As linkers that drop libraries no symbol is taken from (Ubuntu's
         # default): the kernels' registrations must still run.
         "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_FLAGS} -Wl,--as-needed")
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
# The installed library is found through the RPATH CMake sets for the build tree.
run_step(${WORK_DIR}/build/consumer)
