#!/bin/bash
# A LAN neighbour of the rig (issue: "a rig no one else controls"): run in a container on the
# rig's own Docker network, with NET_ADMIN and net.ipv4.conf.all.route_localnet=1, by
# molecule/deploy/tasks/neighbour_probe.yml. It tries every way around the rig's nginx that a
# machine on the LAN has, and prints one line per request: "<name> <HTTP status>", or
# "<name> none" when nothing answered within the time-out.
#   RIG            the rig's address on the shared network (IPv4; RIG6: IPv6, may be empty)
#   ENGINE_ADDRS   the engine container's addresses inside the rig (space-separated, v4 and v6)
#   ENGINE_PORT    the port the engine listens on in its container (8000)
#   LOOPBACK_PORT  the engine's port published on the rig's loopback
#   PUBLIC_PORT    nginx's port on the rig; KEY, the API key. Empty PUBLIC_PORT: a rig with no
#                  nginx (tests/integration/test_engine_guard.py), the nginx probes are left out
#   FINGERPRINT    the SHA-256 of the certificate the rig's verdict printed: nginx speaks only
#                  TLS, asked through /lan_face_check.py (files/lan_face_check.py) pinned to it
#   DECOY_ADDR, DECOY_LOOPBACK_PORT  a plain web server the test started in the rig, unguarded:
#                  what it answers shows the neighbour's tricks work on this Docker
set -u
TIMEOUT=${TIMEOUT:-4}

# One HTTP/1.0 request over bash's /dev/tcp: prints the status code, or "none".
request() {  # addr port method path [authorization]
  local addr=$1 port=$2 method=$3 path=$4 auth=${5:-}
  # No "model": vLLM serves a request that names none with its first served name.
  local body='{"prompt": "hi", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
  local status
  [[ $addr == *:* ]] && addr="[$addr]"
  # shellcheck disable=SC2016  # expanded by the inner bash, from its own arguments
  status=$(timeout "$TIMEOUT" bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    {
      printf "%s %s HTTP/1.0\r\nHost: rig\r\nContent-Type: application/json\r\n" "$2" "$3"
      [ -n "$4" ] && printf "Authorization: %s\r\n" "$4"
      if [ "$2" = POST ]; then printf "Content-Length: %d\r\n\r\n%s" "${#5}" "$5"; else printf "\r\n"; fi
    } >&3
    IFS=" " read -r _ code _ <&3 && echo "$code"' "${addr#[}" "$port" "$method" "$path" "$auth" "$body" \
    2>/dev/null)
  echo "${status:-none}"
}

probe() {  # name addr port method path [authorization]
  echo "$1 $(request "${@:2}")"
}

# The way in that is meant: nginx on the rig's address, over TLS pinned to the verdict's
# fingerprint (nginx-health, -invocations, -v1-with-key, -v1-without-key, -fingerprint), and the
# same port asked in plain HTTP (nginx-plain-health: refused).
if [ -n "${PUBLIC_PORT:-}" ]; then
  # shellcheck disable=SC2153  # RIG, like RIG6, is given by the caller (above)
  python3 /lan_face_check.py --host "$RIG" --port "$PUBLIC_PORT" --fingerprint "$FINGERPRINT" \
    --key-env KEY --lines nginx- || true
fi

# Direct routing: the container's address via the rig (it forwards between its interfaces).
for addr in $DECOY_ADDR $ENGINE_ADDRS; do
  if [[ $addr == *:* ]]; then
    [ -n "${RIG6:-}" ] || continue
    ip -6 route replace "$addr/128" via "$RIG6" || continue
  else
    ip route replace "$addr/32" via "$RIG" || continue
  fi
done
probe routed-decoy "$DECOY_ADDR" 8000 GET /
for addr in $ENGINE_ADDRS; do
  family=v4; [[ $addr == *:* ]] && family=v6
  [ "$family" = v6 ] && [ -z "${RIG6:-}" ] && continue
  probe "routed-$family-invocations" "$addr" "$ENGINE_PORT" POST /invocations
  probe "routed-$family-tokenize" "$addr" "$ENGINE_PORT" POST /tokenize
  probe "routed-$family-metrics" "$addr" "$ENGINE_PORT" GET /metrics
done

# A forged destination: 127.0.0.1 sent to the rig's MAC address. The local table's rule goes
# after one that routes 127.0.0.1 out through the rig (route_localnet lets it leave and return).
ip route replace 127.0.0.1/32 via "$RIG" dev eth0 table 77 &&
  ip rule add pref 10 to 127.0.0.1/32 lookup 77 &&
  ip rule add pref 100 lookup local && ip rule del pref 0 lookup local ||
  echo "forged-setup failed"
probe forged-decoy 127.0.0.1 "$DECOY_LOOPBACK_PORT" GET /
probe forged-invocations 127.0.0.1 "$LOOPBACK_PORT" POST /invocations
probe forged-tokenize 127.0.0.1 "$LOOPBACK_PORT" POST /tokenize
probe forged-metrics 127.0.0.1 "$LOOPBACK_PORT" GET /metrics
