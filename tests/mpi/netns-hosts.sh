#!/usr/bin/env bash
# netns-hosts.sh - runs an MPI program on two "hosts" made on this machine
# out of network namespaces, so two-level (per host, then across hosts)
# communication is tested without a second machine:
#
#   tests/mpi/netns-hosts.sh PROGRAM [ARGS...]
#
# makes three namespaces: NAME-h1 and NAME-h2, the hosts, with addresses
# 10.213.0.1/24 and 10.213.0.2/24 on veth pairs whose other ends hang on a
# bridge in NAME-br. Nothing is added to the machine's own namespace, so no
# traffic leaves the namespaces. Inside NAME-h1 it runs
#
#   mpirun --allow-run-as-root --oversubscribe -np 4 -H 10.213.0.1:2,10.213.0.2:2
#          --mca plm_rsh_agent "THIS-SCRIPT --agent"
#          --mca btl self,vader,tcp --mca btl_tcp_if_include 10.213.0.0/24
#          --mca oob_tcp_if_include 10.213.0.0/24 PROGRAM ARGS
#
# mpirun starts the second host's daemon through the agent (this script
# with --agent HOST COMMAND), which runs COMMAND in that host's namespace,
# as ssh would on a real host. Everything is removed afterwards, also on
# failure or a signal. Exit status: mpirun's. Where namespaces cannot be
# made (no CAP_NET_ADMIN / CAP_SYS_ADMIN, no `ip`) it prints a line
# starting "SKIPPED:" and exits 0.
#
# Each host also gets its own UTS namespace and host name (mxc-host1,
# mxc-host2). Without that both hosts have this machine's name, and Open MPI
# 4.1 crashes (SIGSEGV in mca_pml_ob1_recv_frag_callback_match at the first
# collective) with btl tcp,self as well as with vader: it identifies nodes
# by host name. MXC_NETNS_SAME_HOSTNAME=1 reproduces that.
#
# Environment: MXC_NETNS_BTL (default self,vader,tcp), MXC_NETNS_PER_HOST
# (ranks per host, default 2), MXC_NETNS_SAME_HOSTNAME.
set -u

self=$(readlink -f "$0")
subnet=10.213.0.0/24

# --agent HOST COMMAND...: Open MPI's rsh launcher runs this in place of
# ssh; COMMAND is a shell command line, as ssh would pass it.
if [ "${1:-}" = "--agent" ]; then
    host=$2
    shift 2
    for entry in ${MXC_NETNS_MAP:-}; do
        IFS='=' read -r addr ns name <<<"$entry"
        if [ "$addr" = "$host" ]; then
            exec ip netns exec "$ns" "$self" --as-host "$name" sh -c "$*"
        fi
    done
    echo "netns-hosts.sh --agent: unknown host $host (MXC_NETNS_MAP='${MXC_NETNS_MAP:-}')" >&2
    exit 255
fi

# --as-host NAME COMMAND...: run COMMAND with host name NAME (own UTS
# namespace); an empty NAME keeps the machine's.
if [ "${1:-}" = "--as-host" ]; then
    name=$2
    shift 2
    if [ -z "$name" ]; then exec "$@"; fi
    exec unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
fi

if [ $# -lt 1 ]; then
    echo "usage: $0 PROGRAM [ARGS...]" >&2
    exit 2
fi

skip() {
    echo "SKIPPED: two-host MPI test: $*"
    echo "SKIPPED: two-host MPI test: $*" >&2
    exit 0
}

command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (util-linux)"
command -v mpirun >/dev/null 2>&1 || { echo "netns-hosts.sh: mpirun not found" >&2; exit 1; }

id="mxc$$"
ns1="$id-h1" ns2="$id-h2" nsb="$id-br"
made=()

cleanup() {
    for ns in "${made[@]}"; do
        # Whatever still runs in our namespaces was started by this script.
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! ip netns add "$nsb" 2>/dev/null; then
    skip "cannot create network namespaces here (needs root or CAP_NET_ADMIN)"
fi
made+=("$nsb")
if ! unshare --uts true 2>/dev/null; then
    skip "cannot create UTS namespaces here (needs CAP_SYS_ADMIN)"
fi

fail() {
    echo "netns-hosts.sh: $*" >&2
    exit 1
}
ip -n "$nsb" link add br0 type bridge || fail "cannot create a bridge"
ip -n "$nsb" link set br0 up || fail "cannot bring the bridge up"
map=""
for i in 1 2; do
    ns="$id-h$i"
    ip netns add "$ns" || fail "cannot create namespace $ns"
    made+=("$ns")
    ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$nsb" || fail "cannot create a veth pair"
    ip -n "$nsb" link set "h$i" master br0 || fail "cannot attach h$i to the bridge"
    ip -n "$nsb" link set "h$i" up || fail "cannot bring h$i up"
    ip -n "$ns" addr add "10.213.0.$i/24" dev eth0 || fail "cannot address $ns"
    ip -n "$ns" link set eth0 up || fail "cannot bring eth0 up in $ns"
    ip -n "$ns" link set lo up || fail "cannot bring lo up in $ns"
    name="mxc-host$i"
    [ "${MXC_NETNS_SAME_HOSTNAME:-0}" = 1 ] && name=""
    map="$map 10.213.0.$i=$ns=$name"
done
export MXC_NETNS_MAP="$map"

per_host=${MXC_NETNS_PER_HOST:-2}
first_name="mxc-host1"
[ "${MXC_NETNS_SAME_HOSTNAME:-0}" = 1 ] && first_name=""
# In the background, so that a signal reaches the traps at once.
ip netns exec "$ns1" "$self" --as-host "$first_name" \
    mpirun --allow-run-as-root --oversubscribe -np $((2 * per_host)) \
    -H "10.213.0.1:$per_host,10.213.0.2:$per_host" \
    --mca plm_rsh_agent "$self --agent" \
    --mca btl "${MXC_NETNS_BTL:-self,vader,tcp}" \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    "$@" &
wait $!
