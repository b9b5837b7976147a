#!/usr/bin/env bash
# mpirun's remote launcher for the test hosts of scripts/test_hosts.sh:
# mpirun calls it as `netns_rsh.sh HOST COMMAND...` (as it would call ssh)
# and it runs COMMAND in the network namespace of HOST (10.77.0.1 ->
# spire-h1, 10.77.0.2 -> spire-h2) with `ip netns exec`.
set -euo pipefail
host=$1
shift
case "$host" in
  10.77.0.1|spire-h1) ns=spire-h1 cpu=0 ;;
  10.77.0.2|spire-h2) ns=spire-h2 cpu=1 ;;
  *) echo "netns_rsh: unknown test host '$host'" >&2; exit 1 ;;
esac
# The hosts share this machine's hostname and /tmp: each gets a temporary
# directory of its own, as separate machines have, so that Open MPI's daemons
# never make the same session directory at once (a race that failed a launch
# with "orte_session_dir failed ... File exists").
tmp=/tmp/spire-test-host-$ns
mkdir -p "$tmp"
export OMPI_MCA_orte_tmpdir_base=$tmp PRTE_MCA_prte_tmpdir_base=$tmp
# SPIRE_TEST_HOSTS_PIN=1 (test_hosts.sh run --pin): each host gets a core
# of its own (host 1 CPU 0, host 2 CPU 1, modulo the CPUs there are), so
# its ranks share that core as ranks of one host share its cores, and the
# two hosts do not compete for the same one.
if [[ "${SPIRE_TEST_HOSTS_PIN:-0}" == 1 ]]; then
  exec taskset -c $((cpu % $(nproc --all))) ip netns exec "$ns" /bin/sh -c "$*"
fi
exec ip netns exec "$ns" /bin/sh -c "$*"
