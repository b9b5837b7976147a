# Labels the GoogleTest tests by what the CI stages after the plain suite run
# (.ci/run). ctest includes this file after the GoogleTest lists
# (TEST_INCLUDE_FILES in tests/CMakeLists.txt), so it sees every discovered
# test by name; the tests added by add_test get their labels beside it.
#
# The plain Release suite runs every test. The other stages run what can
# find something new there and leave out what would only repeat it:
# - asan-skip: left out under AddressSanitizer + UndefinedBehaviorSanitizer.
#   Every test touches memory, so only tests that repeat a numeric case
#   another test already ran under ASan are left out.
# - tsan-skip: left out under ThreadSanitizer: tests of index arithmetic,
#   value types, file formats, graph building and gradients that start no
#   thread of their own beyond the executor's lane and reuse kernels the
#   forward tests run. TSan finds data races and lock-order problems; the
#   executor's, session's, kernels', collectives' and trainers' tests
#   exercise the threads. A new test runs under TSan unless a rule below
#   names it.
# - gpu: what the CUDA build runs: the GPU tests (suites named Gpu..., Cuda...
#   or ...Gpu, the tests' convention) and the tests of what the CUDA kernels'
#   registration changes (coverage checks, placement, the installed package);
#   the rest of that build's suite is the plain suite's code, not run twice.
#
# spire_label(LABEL REGEX [EXCEPT REGEX]) labels the tests whose name matches
# REGEX (CMake's regular expressions) and not the EXCEPT one; the labels are
# set at the end of this file.

set(_spire_rule_label "")
set(_spire_rule_match "")
set(_spire_rule_except "")
function(spire_label label regex)
  set(except "^$")
  if(ARGC EQUAL 4 AND ARGV2 STREQUAL "EXCEPT")
    set(except "${ARGV3}")
  endif()
  list(APPEND _spire_rule_label "${label}")
  list(APPEND _spire_rule_match "${regex}")
  list(APPEND _spire_rule_except "${except}")
  set(_spire_rule_label "${_spire_rule_label}" PARENT_SCOPE)
  set(_spire_rule_match "${_spire_rule_match}" PARENT_SCOPE)
  set(_spire_rule_except "${_spire_rule_except}" PARENT_SCOPE)
endfunction()

# ---- ASan: numeric repeats ----
# Every CPU/GPU parity case again, to compare two runs: the forward tests and
# the gradient check already run each of those kernels under ASan.
spire_label(asan-skip "^ParityCases[.]RunOnTheCpuTwiceWithTheSameResult$")
# The models' PyTorch parity: the ops' kernels again at model scale (a minute in
# Release, tens under a sanitizer); their tests ran them under ASan and TSan.
spire_label(asan-skip "^(ResNetParity|GptParity)[.]")
spire_label(tsan-skip "^(ResNetParity|GptParity)[.]")
# The attention op against PyTorch: the same kernels as the AttentionOps and forward
# tests, which run under both sanitizers.
spire_label(asan-skip "^AttentionTorchParity[.]")
spire_label(tsan-skip "^AttentionTorchParity[.]")
# LayerNorm and GELU against PyTorch: likewise (norm_ops_test runs the kernels).
spire_label(asan-skip "^NormTorchParity[.]")
spire_label(tsan-skip "^NormTorchParity[.]")

# ---- TSan: tests that start no thread of their own ----
# (Not the ops' forward tests: kernels such as the random ones split their
# work over the session's thread pool, and those tests are where it runs.)
spire_label(tsan-skip "^(ArrayIndex|BroadcastIndex|ReduceIndex|PoolIndex)[.]")
spire_label(tsan-skip "^(GradientCheck|ParityCases|ForwardCoverage|GemmDispatch)[.]")
spire_label(tsan-skip "^(Half|Philox|DType|Shape|Tensor|Crc32c|FlatPath|NaN|CudnnLimits|EventEncoding)[.]")
spire_label(tsan-skip "^(CheckpointCorruption|CheckpointBitFlips|CheckpointForeign|CheckpointIndex)[.]")
spire_label(tsan-skip "^(MnistIdx|Cifar10|Graph|GraphVarParam|FuzzSeeds|FileUtil)[.]")
spire_label(tsan-skip "^(Layer[A-Za-z0-9]*|Initializers|OptimizerTest|NnOps|DropoutGradient|Gradients)[.]")

# ---- the CUDA build ----
spire_label(gpu "^(Gpu|Cuda)[A-Za-z0-9_]*[.]")
spire_label(gpu "^[A-Za-z0-9_]*Gpu[.]")
spire_label(gpu "^(ForwardCoverage|GradientCheck|Placement)[.]")

# ---- set the labels ----
foreach(t IN LISTS spire_tests_TESTS)
  set(_labels "")
  list(LENGTH _spire_rule_label _n)
  math(EXPR _last "${_n} - 1")
  foreach(i RANGE ${_last})
    list(GET _spire_rule_label ${i} _label)
    list(GET _spire_rule_match ${i} _match)
    list(GET _spire_rule_except ${i} _except)
    if(t MATCHES "${_match}" AND NOT t MATCHES "${_except}")
      list(APPEND _labels ${_label})
    endif()
  endforeach()
  if(_labels)
    set_tests_properties("${t}" PROPERTIES LABELS "${_labels}")
  endif()
endforeach()
