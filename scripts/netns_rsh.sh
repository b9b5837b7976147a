#!/usr/bin/env bash
# mpirun's remote launcher for the test hosts of scripts/test_hosts.sh:
# mpirun calls it as `netns_rsh.sh HOST COMMAND...` (as it would call ssh)
# and it runs COMMAND in the network namespace of HOST (10.77.0.1 ->
# spire-h1, 10.77.0.2 -> spire-h2) with `ip netns exec`.
set -euo pipefail
host=$1
shift
case "$host" in
  10.77.0.1|spire-h1) ns=spire-h1 ;;
  10.77.0.2|spire-h2) ns=spire-h2 ;;
  *) echo "netns_rsh: unknown test host '$host'" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
