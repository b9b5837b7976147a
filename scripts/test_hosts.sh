#!/usr/bin/env bash
# Test hosts on this machine: network namespaces "spire-h1" and "spire-h2"
# (addresses 10.77.0.1 and 10.77.0.2 of their own subnet) joined to this
# namespace by veth pairs on a bridge (10.77.0.254), with mpirun's remote
# launcher pointed at them (scripts/netns_rsh.sh runs a command "on" a
# host with `ip netns exec`), so MPI jobs span 2 "hosts" x N ranks and the
# ranks of different hosts talk TCP over the veth links. Optional `tc`
# shaping of each host's link: rate (tbf) and delay (netem, where the kernel
# has it; otherwise the script says so and shapes the rate only).
#
# usage: scripts/test_hosts.sh up [--rate 1gbit] [--delay 100us]   create (or reshape) the hosts
#        scripts/test_hosts.sh down                                remove them
#        scripts/test_hosts.sh run [--pin] -np 4 PROGRAM ARGS...   mpirun across the hosts (2 ranks each for -np 4;
#                                                                  --pin: each host on a core of its own)
#        scripts/test_hosts.sh check [BUILD_DIR]                   up, the MPI tests and a short
#                                                                  HorovodTrainer run on 2 hosts x 2 ranks, the
#                                                                  collectives on 2 hosts x 3 ranks, down
# Needs root and iproute2; `check` exits 0 saying "skipped" where namespaces
# cannot be made (CI runs it so).
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=(spire-h1 spire-h2)
ADDRS=(10.77.0.1 10.77.0.2)
BRIDGE=spirebr0
NET=10.77.0.0/24

up() {
  local rate="" delay=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      *) echo "test_hosts: unknown option $1" >&2; exit 2 ;;
    esac
  done
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add 10.77.0.254/24 dev "$BRIDGE"
    ip link set "$BRIDGE" up
  fi
  for i in 0 1; do
    local ns=${HOSTS[$i]} addr=${ADDRS[$i]} veth="spv$i" peer="spp$i"
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip link add "$veth" type veth peer name "$peer"
      ip link set "$peer" netns "$ns"
      ip link set "$veth" master "$BRIDGE"
      ip link set "$veth" up
      ip netns exec "$ns" ip addr add "$addr/24" dev "$peer"
      ip netns exec "$ns" ip link set "$peer" up
      ip netns exec "$ns" ip link set lo up
    fi
    # Shaping: both directions of the host's link (egress of each end).
    for side in host ns; do
      local cmd=(tc) dev=$veth
      [[ $side == ns ]] && cmd=(ip netns exec "$ns" tc) dev=$peer
      "${cmd[@]}" qdisc del dev "$dev" root >/dev/null 2>&1 || true
      if [[ -n $delay ]]; then
        # netem: delay (and rate); not every kernel has it.
        local args=(delay "$delay")
        [[ -n $rate ]] && args+=(rate "$rate")
        if ! "${cmd[@]}" qdisc add dev "$dev" root netem "${args[@]}" limit 100000 2>/dev/null; then
          echo "test_hosts: this kernel has no netem qdisc: no delay shaping${rate:+; rate only (tbf)}" >&2
          delay=""
          [[ -n $rate ]] && "${cmd[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
        fi
      elif [[ -n $rate ]]; then
        "${cmd[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
      fi
    done
  done
  # New links take a moment to forward (a first TCP connect of mpirun right
  # after `up` failed once in CI): wait, bounded, until both hosts' links
  # are up and their bridge ports forward (brport state 3).
  local tries=0 i ready
  while :; do
    ready=1
    for i in 0 1; do
      [[ $(cat "/sys/class/net/spv$i/brport/state" 2>/dev/null) == 3 ]] || ready=0
      [[ $(ip netns exec "${HOSTS[$i]}" cat "/sys/class/net/spp$i/operstate" 2>/dev/null) == up ]] || ready=0
    done
    (( ready )) && break
    if (( ++tries >= 50 )); then
      echo "test_hosts: the hosts' links are not forwarding after 10 s" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "test hosts up: ${HOSTS[0]}=${ADDRS[0]} ${HOSTS[1]}=${ADDRS[1]}${rate:+ rate $rate}${delay:+ delay $delay}"
}

down() {
  for i in 0 1; do
    ip netns del "${HOSTS[$i]}" >/dev/null 2>&1 || true
    ip link del "spv$i" >/dev/null 2>&1 || true
  done
  ip link del "$BRIDGE" >/dev/null 2>&1 || true
}

# mpirun across the two hosts: ranks split evenly, TCP between the hosts and
# also within one (the hosts share this machine's /dev/shm and hostname, which
# confuses the shared-memory transport); mpirun stays in this namespace.
run_mpi() {
  local np=2
  if [[ ${1:-} == --pin ]]; then
    export SPIRE_TEST_HOSTS_PIN=1  # read by scripts/netns_rsh.sh
    shift
  fi
  local args=("$@")
  for ((k = 0; k < ${#args[@]}; ++k)); do
    if [[ ${args[$k]} == -np ]]; then np=${args[$((k + 1))]}; fi
  done
  local per=$(( (np + 1) / 2 ))
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
    mpirun --oversubscribe -H "${ADDRS[0]}:$per,${ADDRS[1]}:$per" \
      --mca plm_rsh_agent "$PWD/scripts/netns_rsh.sh" --mca rtc ^hwloc \
      --mca oob_tcp_if_include "$NET" --mca btl_tcp_if_include "$NET" --mca btl tcp,self \
      "${args[@]}"
}

check() {
  local build=${1:-build}
  if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns add spire-probe 2>/dev/null; then
    echo "test_hosts check: skipped: cannot create network namespaces here (needs root, iproute2 and CAP_NET_ADMIN)"
    return 0
  fi
  ip netns del spire-probe
  [[ -x $build/tests/spire_mpi_tests ]] || { echo "test_hosts check: $build/tests/spire_mpi_tests not built" >&2; return 1; }
  trap down EXIT
  down
  up
  echo "== the MPI tests on 2 hosts x 2 ranks (TCP between the hosts)"
  run_mpi -np 4 -x SPIRE_TEST_EXPECT_HOSTS=2 "$build/tests/spire_mpi_tests" --gtest_filter=-*Stalled* 2>&1 | tail -3
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "test_hosts check: the MPI tests failed across hosts" >&2; return 1; }
  echo "== the collectives on 2 hosts x 3 ranks (the fold inside the hosts)"
  run_mpi -np 6 -x SPIRE_TEST_EXPECT_HOSTS=2 "$build/tests/spire_mpi_tests" \
    --gtest_filter='MpiCommunicator.Every*:MpiCommunicator.TheRing*:MpiCommunicator.Half*:MpiCommunicator.Auto*' 2>&1 | tail -3
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "test_hosts check: the MPI tests failed on 2 hosts x 3 ranks" >&2; return 1; }
  echo "== the same over shaped links (1 Gbit/s, 200 us each way where netem exists)"
  up --rate 1gbit --delay 200us
  run_mpi -np 4 "$build/tests/spire_mpi_tests" --gtest_filter='MpiCommunicator.Every*:HorovodTrainer.Ranks*' 2>&1 | tail -3
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "test_hosts check: the MPI tests failed over the shaped link" >&2; return 1; }
  up
  echo "== rank failures on 2 hosts x 1 rank (TCP): raised, SIGSTOPped, SIGKILLed (recovery), exited, slow"
  python3 tests/dist/mpi/rank_failures.py "bash scripts/test_hosts.sh run" "$build/tests/spire_mpi_tests" 2 \
    raise stop kill-recovery exit slow ps-kill-worker || { echo "test_hosts check: a rank failure case failed across hosts" >&2; return 1; }
  if [[ -x $build/examples/mnist_convnet ]] && [[ -f ../shared/data/mnist/train-images-idx3-ubyte.gz ]]; then
    echo "== a short HorovodTrainer run on 2 hosts x 2 ranks"
    local log
    log=$(mktemp -d)
    run_mpi -np 4 "$build/examples/mnist_convnet" --trainer horovod --max-epoch 1 --steps-per-epoch 20 \
      --threads 1 --logdir "$log/run" >"$log/out" 2>&1 || { tail -20 "$log/out"; return 1; }
    grep -E "variables checksum|final validation" "$log/out"
    local sums
    sums=$(grep -o 'variables checksum (rank [0-9]*): [0-9a-f]*' "$log/out" | awk '{print $NF}' | sort -u | wc -l)
    [[ $sums -eq 1 ]] || { echo "test_hosts check: the ranks' variables differ" >&2; return 1; }
    rm -rf "$log"
  else
    echo "== (the training run is skipped: no examples build or no MNIST files)"
  fi
  echo "test_hosts check: passed"
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  run) run_mpi "$@" ;;
  check) check "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
