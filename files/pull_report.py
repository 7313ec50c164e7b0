#!/usr/bin/env python3
"""The pull script's report work (standard library only, Python 3.9+): what
roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2 runs in Python, installed
beside it by the same task (/usr/local/lib/vllm-dual-fast/pull_report.py).

    pull_report.py state key=value...           the pull state as JSON on stdout (state/pull.json)
    pull_report.py tagged REPORT RIG PULL_JSON  this rig's report with the pull state under "pull"
    pull_report.py envelope REPORT_TEXT [WHY]   the signed upload (files/schemas/
                                                signed-report.schema.json) of REPORT_TEXT, with
                                                its signature from REPORT_TEXT.sig, or unsigned
                                                saying WHY
    pull_report.py names                        the names this machine answers to, one line
"""
import datetime
import json
import platform
import socket
import sys

# pull.json's whole numbers; next_try is an epoch written as an ISO 8601 time.
NUMBERS = ("rc", "next_try", "attempts", "check_rc")
SIGNED_FORMAT = "vllm-dual-fast/signed-report"
NAMESPACE = "vllm-dual-fast-report"


def pull_state(pairs, now=None):
    """The pull state from the script's key=value words, stamped with the time it was written."""
    pull = dict(pair.split("=", 1) for pair in pairs)
    for key in NUMBERS:
        if key in pull:
            pull[key] = int(pull[key])
    if "next_try" in pull:
        pull["next_try"] = datetime.datetime.fromtimestamp(
            pull["next_try"], datetime.timezone.utc).isoformat()
    pull["at"] = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat()
    return pull


def json_object(path):
    """The JSON object in a file; {} when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tagged_report(report_path, host, pull_path):
    """This rig's report with the pull state under "pull": a run that failed before health
    leaves the previous report in place, and the fleet owner must not read it as the new one.
    No report (the first run here failed before health): the host and the pull state alone."""
    report = json_object(report_path)
    report.setdefault("host", host)
    report["pull"] = json_object(pull_path)
    return report


def envelope(report_path, unsigned=""):
    """The upload: the report's text exactly as signed, and the signature the script made
    (report_path + .sig), or none and why."""
    with open(report_path, "rb") as f:
        text = f.read().decode("utf-8")
    upload = {"format": SIGNED_FORMAT, "version": 1, "namespace": NAMESPACE, "report": text,
              "signature": None}
    if unsigned:
        upload["unsigned_reason"] = unsigned
    else:
        with open(report_path + ".sig", encoding="ascii") as f:
            upload["signature"] = f.read()
    return upload


def own_names():
    """The names ansible-pull's checkout may take this machine for (fully qualified and short)."""
    fqdn, node = socket.getfqdn(), platform.node()
    return sorted({fqdn, node, fqdn.split(".")[0], node.split(".")[0], "localhost",
                   "127.0.0.1"})


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "state":
        json.dump(pull_state(args), sys.stdout, indent=2)
    elif command == "tagged":
        json.dump(tagged_report(*args), sys.stdout, indent=2)
    elif command == "envelope":
        json.dump(envelope(args[0], args[1] if len(args) > 1 else ""), sys.stdout, indent=2)
    elif command == "names":
        print(" ".join(own_names()))
    else:
        print(f"pull_report.py: unknown command {command!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
