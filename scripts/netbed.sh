#!/bin/bash
# A multi-host test bed on one machine: N network namespaces ("hosts"), each
# with an eth0 joined by veth pairs to a bridge in a namespace of its own,
# so nothing of the machine's own network changes. Links can be shaped
# (tc netem delay/loss/rate where the kernel has sch_netem; tbf rate
# otherwise) and cut (link down). Used by tests/fault; needs root (or
# CAP_NET_ADMIN), ip and tc.
#
#   netbed.sh up NAME N [--delay 2ms] [--loss 1%] [--rate 100mbit]
#       creates hosts NAME-0 .. NAME-(N-1) at 10.77.0.1 .. 10.77.0.N and the
#       bridge namespace NAME-br; prints "host <i> <namespace> <address>"
#   netbed.sh down NAME       removes them (every NAME-* namespace)
#   netbed.sh exec NAME I CMD...   runs CMD on host I
#   netbed.sh cut NAME I      takes host I's link down (its peers see silence)
#   netbed.sh heal NAME I     brings it back
#   netbed.sh shape NAME I [--delay D] [--loss L] [--rate R]
#   netbed.sh check           exit 0 if namespaces can be made here, else
#                             77 with the reason on stderr (ctest's skip)
#   netbed.sh features        prints "netem" and/or "tbf": the qdiscs the
#                             kernel has
set -euo pipefail

die() { echo "netbed: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "needs '$1' (Debian iproute2)"; }

address() { echo "10.77.0.$(($1 + 1))"; }

# qdisc_args DELAY LOSS RATE: the tc arguments for one link, netem when the
# kernel has it, else tbf for a rate (delay and loss then refused).
qdisc_args() {
  local delay=$1 loss=$2 rate=$3
  if has_qdisc netem; then
    local a="netem"
    [ -n "$delay" ] && a="$a delay $delay"
    [ -n "$loss" ] && a="$a loss $loss"
    [ -n "$rate" ] && a="$a rate $rate"
    echo "$a"
  else
    [ -z "$delay" ] && [ -z "$loss" ] || \
      die "this kernel has no sch_netem: delay and loss cannot be emulated (rate can, with tbf)"
    [ -n "$rate" ] && echo "tbf rate $rate burst 64kb latency 100ms"
  fi
  return 0
}

# has_qdisc KIND: whether the kernel knows the queueing discipline.
has_qdisc() {
  local ns="netbed-probe-$$"
  ip netns add "$ns" 2>/dev/null || return 1
  local ok=1
  ip netns exec "$ns" tc qdisc add dev lo root "$1" $( [ "$1" = tbf ] && echo "rate 1mbit burst 32kb latency 50ms") \
    >/dev/null 2>&1 && ok=0
  ip netns del "$ns" 2>/dev/null || true
  return $ok
}

parse_shape() {
  DELAY="" LOSS="" RATE=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --delay) DELAY=$2; shift 2 ;;
      --loss) LOSS=$2; shift 2 ;;
      --rate) RATE=$2; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
}

shape() {
  local ns=$1; shift
  parse_shape "$@"
  ip netns exec "$ns" tc qdisc del dev eth0 root >/dev/null 2>&1 || true
  local q
  q=$(qdisc_args "$DELAY" "$LOSS" "$RATE")
  [ -n "$q" ] && ip netns exec "$ns" tc qdisc add dev eth0 root $q
  return 0
}

cmd=${1:-}
case "$cmd" in
  check)
    for t in ip tc; do
      command -v $t >/dev/null || { echo "netbed: '$t' not found (Debian iproute2)" >&2; exit 77; }
    done
    ns="netbed-check-$$"
    if ! err=$(ip netns add "$ns" 2>&1); then
      echo "netbed: cannot create a network namespace ($err): run as root or with CAP_NET_ADMIN" >&2
      exit 77
    fi
    ip netns del "$ns"
    ;;
  features)
    has_qdisc netem && echo netem
    has_qdisc tbf && echo tbf
    true
    ;;
  up)
    need ip
    name=${2:?name}; n=${3:?host count}; shift 3
    parse_shape "$@"
    [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "host count must be 1..200"
    br="$name-br"
    ip netns add "$br"
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up
    for ((i = 0; i < n; i++)); do
      ns="$name-$i"
      ip netns add "$ns"
      ip -n "$br" link add "v$i" type veth peer name eth0 netns "$ns"
      ip -n "$br" link set "v$i" master br0
      ip -n "$br" link set "v$i" up
      ip -n "$ns" link set lo up
      ip -n "$ns" addr add "$(address $i)/24" dev eth0
      ip -n "$ns" link set eth0 up
      if [ -n "$DELAY$LOSS$RATE" ]; then
        args=()
        [ -n "$DELAY" ] && args+=(--delay "$DELAY")
        [ -n "$LOSS" ] && args+=(--loss "$LOSS")
        [ -n "$RATE" ] && args+=(--rate "$RATE")
        shape "$ns" "${args[@]}"
      fi
      echo "host $i $ns $(address $i)"
    done
    ;;
  down)
    name=${2:?name}
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-([0-9]+|br)$" || true); do
      ip netns del "$ns" || true
    done
    ;;
  exec)
    name=${2:?name}; i=${3:?host}; shift 3
    exec ip netns exec "$name-$i" "$@"
    ;;
  cut)
    ip -n "${2:?name}-${3:?host}" link set eth0 down ;;
  heal)
    ip -n "${2:?name}-${3:?host}" link set eth0 up ;;
  shape)
    name=${2:?name}; i=${3:?host}; shift 3
    shape "$name-$i" "$@" ;;
  *)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 1
    ;;
esac
