#!/usr/bin/env python3
"""A pulled rig's signed upload, read and verified (standard library only, Python 3.9+).

What a pull rig PUTs to its report URL on every run is an envelope (files/schemas/
signed-report.schema.json, built by the pull script): the report's JSON text and the rig's own
SSH signature of it, made with the key the rig got at enrolment. This module reads an upload
(parse_upload), the fleet's list of rig keys in git's allowed-signers format (read_rig_keys),
and checks that an upload is the rig it claims to be (verify_upload, through `ssh-keygen -Y
verify`). fleet_report.py renders what verified, and lists the rest apart; pull_metrics.py
exports it. Copied together with them wherever they run (the controller, the monitoring host).
"""

import json
import re
import subprocess
import tempfile

SIGNED_FORMAT = "vllm-dual-fast/signed-report"
NAMESPACE = "vllm-dual-fast-report"
# A rig name that is one principal of an allowed-signers file (no pattern, no list).
RIG_NAME = re.compile(r"^[A-Za-z0-9._@+-]+$")
# How long a reason may be on one line of the fleet report.
REASON_CHARS = 160


class BadInput(Exception):
    """An input the tools refuse (exit 2): also a signature nothing here can check."""


def one_line(text, limit: int = REASON_CHARS) -> str:
    """Whitespace folded to single spaces, cut at `limit` characters with '...'."""
    if isinstance(text, (list, tuple)):
        text = "; ".join(str(t) for t in text)
    text = re.sub(r"\s+", " ", str(text or "")).strip()
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _text(value):
    return value if isinstance(value, str) and value.strip() else None


def parse_upload(data: bytes) -> dict:
    """What a pulled upload holds: {"text": the report's JSON text or None, "report": it as a
    dict or None, "signature": the armored SSH signature or None, "why": why it is not a
    signed report (None when it is)}. A bare report (no envelope) is an unsigned one."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {"text": None, "report": None, "signature": None,
                "why": f"not JSON ({type(exc).__name__})"}
    if not (isinstance(value, dict) and value.get("format") == SIGNED_FORMAT):
        report = value if isinstance(value, dict) else None
        return {"text": None, "report": report, "signature": None,
                "why": "unsigned (a bare report, not the pull script's signed upload)"}
    text = value.get("report")
    try:
        report = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        report = None
    signature = value.get("signature")
    why = None
    if value.get("version") != 1 or value.get("namespace") != NAMESPACE:
        why = "an envelope of another version or namespace"
    elif not isinstance(report, dict):
        why = "its report is not a JSON object"
    elif not isinstance(signature, str) or not signature.strip():
        why = "unsigned" + (f" ({one_line(value['unsigned_reason'], 80)})"
                            if _text(value.get("unsigned_reason")) else "")
    return {"text": text if isinstance(text, str) else None,
            "report": report if isinstance(report, dict) else None,
            "signature": signature if isinstance(signature, str) else None, "why": why}


def rig_key_names(text: str) -> set:
    """The principals (rig names) of an allowed-signers file's text."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.update(name for name in line.split()[0].split(",") if name)
    return names


def read_rig_keys(path):
    """(keys path or None, rig names, notes) of --rig-keys FILE; a FILE that does not exist (or
    cannot be read) verifies nothing, and says so."""
    try:
        with open(path, encoding="utf-8") as f:
            return path, rig_key_names(f.read()), []
    except OSError as exc:
        why = "does not exist" if isinstance(exc, FileNotFoundError) else (exc.strerror or exc)
        return None, set(), [f"rig keys file {path} {why}: no pulled report can be verified"]


def ssh_verify(keys_path: str, rig: str, text: str, signature: str) -> bool:
    """Whether `signature` is rig `rig`'s (by FILE keys_path) of `text`, in this tool's
    namespace: `ssh-keygen -Y verify`, the text on its stdin. BadInput without ssh-keygen."""
    with tempfile.NamedTemporaryFile("w", suffix=".sig", encoding="ascii") as sig:
        sig.write(signature)
        sig.flush()
        try:
            run = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", keys_path, "-I", rig,
                                  "-n", NAMESPACE, "-s", sig.name], input=text.encode("utf-8"),
                                 capture_output=True, timeout=60, check=False)
        except FileNotFoundError:
            # Not a forgery: nothing here can tell. Calling every upload forged would hide it.
            raise BadInput("ssh-keygen is not installed (package openssh-client): the uploads' "
                           "signatures cannot be checked") from None
        except (OSError, subprocess.SubprocessError):
            return False
    return run.returncode == 0


def verify_upload(rig: str, upload: dict, keys_path, enrolled: set, verify=ssh_verify):
    """(report, None) when `upload` (parse_upload's) verifies as rig `rig` (the name it was
    uploaded under), else (None, why): unsigned, a rig not in the keys file, a signature not
    the rig's (another rig's key, or changed after signing), or a report naming another host."""
    if not RIG_NAME.match(rig):
        return None, f"{rig!r} is not a rig name"
    if upload["why"]:
        return None, upload["why"]
    if keys_path is None or rig not in enrolled:
        return None, f"{rig} is not in the rig keys file (not enrolled, or its line is missing)"
    if not verify(keys_path, rig, upload["text"], upload["signature"]):
        return None, (f"its signature does not verify as {rig}'s (signed with another rig's "
                      "key, or changed after signing)")
    host = upload["report"].get("host")
    if host != rig:
        return None, f"the signed report names host {host!r}, uploaded as {rig!r}"
    return upload["report"], None
