"""The P2P check's record (issue 46, part 2): what files/p2p_check.py found on this rig, kept in
{state_dir}/p2p-check.json (files/schemas/p2p-check.schema.json) with the key it holds for, and
what the health report shows of it. The check runs again when the key changes: other GPUs, a
driver or VBIOS (nvidia-smi's uuid, vbios_version, driver_version), another image (its torch and
NCCL), another backend or NVLink setting; or every run (mode `always`)."""

from __future__ import annotations

import base64
import json

RECORD_SCHEMA_VERSION = 1
MODES = ("changed", "always", "never")


def p2p_check_key(gpu_identity, image_id, backend, nvlink) -> dict:
    """What a check's answer holds for."""
    # a fact may arrive as text ("False"), which bool() would read as true
    linked = nvlink if isinstance(nvlink, bool) else str(nvlink).strip().lower() in (
        "true", "yes", "1")
    return {"gpu_identity": str(gpu_identity or "").strip(), "image_id": str(image_id or ""),
            "backend": str(backend or ""), "nvlink": linked}


def p2p_stored(slurped) -> dict:
    """The record a registered slurp of p2p-check.json holds, else {} (none, unreadable, or of
    another schema version)."""
    content = (slurped or {}).get("content") if isinstance(slurped, dict) else None
    try:
        record = json.loads(base64.b64decode(content)) if content else {}
    except (ValueError, TypeError):
        return {}
    if not isinstance(record, dict) or record.get("schema_version") != RECORD_SCHEMA_VERSION:
        return {}
    return record


def p2p_check_due(slurped, key, mode) -> bool:
    """Whether this run checks: never for `never`, always for `always`, else when no record
    holds for this key."""
    if mode not in MODES:
        raise ValueError(f"P2P check mode {mode!r}: one of {', '.join(MODES)}")
    if mode == "never":
        return False
    return mode == "always" or p2p_stored(slurped).get("key") != key


def p2p_check_record(key, run, checked_at) -> dict:
    """The record of one check from its registered run (p2p_check.py's stdout, exit code): the
    key, when, the arms and the decision. A run that printed no result (the container did not
    start, a crash) is a decision of none, its error kept: the rig must not serve on it."""
    run = run if isinstance(run, dict) else {}
    try:
        found = json.loads(run.get("stdout") or "")
    except ValueError:
        found = {}
    decision = found.get("decision") if isinstance(found, dict) else None
    if not isinstance(decision, dict) or run.get("rc") not in (0, 1):
        error = (str(run.get("stderr") or run.get("msg") or "").strip().splitlines() or ["?"])[-1]
        found = {"arms": {}, "decision": {
            "arm": "", "nccl_p2p_disable": True, "measured": False,
            "why": f"the check did not run to its end (exit code {run.get('rc')}): {error[:300]}"}}
    return {"schema_version": RECORD_SCHEMA_VERSION, "key": key, "checked_at": str(checked_at),
            "arms": found.get("arms") or {}, "decision": found["decision"]}


def p2p_decision(record) -> str:
    """The arm the rig serves with ("p2p", "no-p2p"), or "" (none: it must not serve)."""
    return str(((record or {}).get("decision") or {}).get("arm") or "")


def p2p_report(slurped) -> dict:
    """The health report's `p2p`: the last check's decision and arms, {} when none was kept."""
    record = p2p_stored(slurped)
    if not record:
        return {}
    decision = record.get("decision") or {}
    return {"checked_at": record.get("checked_at") or "",
            "arm": str(decision.get("arm") or ""),
            "nccl_p2p_disable": bool(decision.get("nccl_p2p_disable")),
            "measured": bool(decision.get("measured")),
            "why": str(decision.get("why") or ""),
            "arms": {name: {"result": str(arm.get("result") or ""),
                            "seconds": arm.get("seconds")}
                     for name, arm in (record.get("arms") or {}).items()
                     if isinstance(arm, dict)}}
