#!/usr/bin/env python3
"""The LAN face's own check (tasks/proxy.yml runs it on the rig once nginx serves the site; the
deploy scenario's LAN neighbour runs it from beside the rig): over TLS, pinned to the
certificate fingerprint the verdict prints, /health answers 200 and vLLM's unkeyed
/invocations 404 (with --key-env, /v1/models 401 without the key and 200 with it); a
plain-HTTP request on the same port is refused with 400, never proxied. Nothing is sent over a
connection whose certificate is not the pinned one. Standard library only (Python 3.9+).

    lan-face-check --host H --port P --fingerprint AB:CD:... [--key-env NAME] [--lines PREFIX]

Prints one JSON object {"fingerprint": what the port served, "checks": {name: status},
"problems": [...]} (--lines: "<PREFIX><name> <status>" lines and "<PREFIX>fingerprint
match|mismatch|none"); a status is the HTTP code, "none" when nothing answered, or
"pin-mismatch". Exit: 0 every check as expected; 1 one is not; 2 bad arguments.
"""

import argparse
import hashlib
import http.client
import json
import os
import socket
import ssl
import sys

TIMEOUT_S = 10
# name -> (method, path, TLS?, with the key?, the status expected)
CHECKS = {
    "health": ("GET", "/health", True, False, 200),
    "invocations": ("POST", "/invocations", True, False, 404),
    "plain-health": ("GET", "/health", False, False, 400),
}
KEY_CHECKS = {
    "v1-without-key": ("GET", "/v1/models", True, False, 401),
    "v1-with-key": ("GET", "/v1/models", True, True, 200),
}
BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'


def fingerprint_of(der: bytes) -> str:
    """A DER certificate's SHA-256 fingerprint as openssl prints it: AB:CD:... (upper case)."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normal_fingerprint(text: str) -> str:
    """AB:CD:... from any case, with or without colons; '' when it is not 32 bytes of hex."""
    hexes = "".join(ch for ch in str(text or "") if ch not in ": ").upper()
    if len(hexes) != 64 or any(ch not in "0123456789ABCDEF" for ch in hexes):
        return ""
    return ":".join(hexes[i:i + 2] for i in range(0, 64, 2))


def _unverified_context() -> ssl.SSLContext:
    # Trust is the pinned fingerprint, checked before anything is sent: no CA, no host name.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def request(host, port, method, path, tls, pin, authorization=None):
    """(status, fingerprint served or None): the status as an int, or "none" (no answer) or
    "pin-mismatch" (TLS with another certificate: nothing was sent)."""
    if tls:
        conn = http.client.HTTPSConnection(host, port, timeout=TIMEOUT_S,
                                           context=_unverified_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    served = None
    try:
        conn.connect()
        if tls:
            served = fingerprint_of(conn.sock.getpeercert(binary_form=True))
            if served != pin:
                return "pin-mismatch", served
        headers = {"Content-Type": "application/json", "Host": "rig"}
        if authorization:
            headers["Authorization"] = authorization
        conn.request(method, path, body=BODY if method == "POST" else None, headers=headers)
        return conn.getresponse().status, served
    except (OSError, http.client.HTTPException, ssl.SSLError):
        return "none", served
    finally:
        conn.close()


def problems(checks: dict, expected: dict) -> list:
    """One sentence per check whose status is not the one expected."""
    return [f"{name}: {status}, expected {expected[name]}" for name, status in checks.items()
            if status != expected[name]]


def run(host, port, pin, key=None) -> dict:
    wanted = dict(CHECKS, **(KEY_CHECKS if key else {}))
    checks, served = {}, None
    for name, (method, path, tls, with_key, _) in wanted.items():
        status, seen = request(host, port, method, path, tls, pin,
                               f"Bearer {key}" if with_key else None)
        checks[name] = status
        served = served or seen
    expected = {name: spec[4] for name, spec in wanted.items()}
    return {"fingerprint": served, "checks": checks, "problems": problems(checks, expected)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--fingerprint", required=True, help="SHA-256, AB:CD:... (pinned)")
    parser.add_argument("--key-env", metavar="NAME",
                        help="an environment variable holding the API key (never an argument)")
    parser.add_argument("--lines", metavar="PREFIX", help="print name/status lines")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    pin = normal_fingerprint(args.fingerprint)
    if not pin:
        sys.stderr.write("lan-face-check: --fingerprint must be 32 bytes of hex (AB:CD:...)\n")
        return 2
    key = os.environ.get(args.key_env, "") if args.key_env else None
    if args.key_env and not key:
        sys.stderr.write(f"lan-face-check: {args.key_env} is empty\n")
        return 2
    host = args.host.strip("[]")
    result = run(host, args.port, pin, key)
    if args.lines is not None:
        seen = result["fingerprint"]
        print(f"{args.lines}fingerprint "
              + ("none" if seen is None else "match" if seen == pin else "mismatch"))
        for name, status in result["checks"].items():
            print(f"{args.lines}{name} {status}")
    else:
        print(json.dumps(result, indent=2))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    socket.setdefaulttimeout(TIMEOUT_S)
    sys.exit(main())
