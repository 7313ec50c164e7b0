#!/usr/bin/env python3
"""Fleet report of a rollout: one row per rig (standard library only, Python 3.9+).

    python3 fleet_report.py --reports DIR [--pulled DIR [--rig-keys FILE]] [--state-dir DIR]
                            [--hosts A,B,...] [--stale-after SECONDS] [--ref-commit COMMIT]
                            --out DIR [--print]

Inputs
  --reports DIR  the per-rig health reports the role writes on the controller, DIR/<host>.json
                 (files/schemas/health-report.schema.json: schema_version, host, release, image,
                 healthy, failures [{check, result, line, advice}], smoke, kernel_xid_lines,
                 patch_status, patch_report, checked_at, ...). A report of a schema version
                 other than 1 (no key; failures were lines) or 2 is a "no-report" row saying so.
                 Top-level *.json only; this tool's own fleet-*.json and JSON objects without a
                 "host" key are skipped; a file that is not JSON becomes a row saying so.
  --pulled DIR   the same reports as uploaded by rigs that pull (same shape, plus "pull": {state,
                 ref, commit, rc, at, signer, reason, next_try, applied_commit, valid_until,
                 tag_signer} of the run that uploaded it, as the pull script writes it); a
                 folder that does not exist yet counts as empty. A pull state "expired" (the
                 fleet's signed Valid-Until passed) counts as a refusal.
                 Each upload is the pull script's signed envelope (files/schemas/
                 signed-report.schema.json: the report's JSON text and the rig's SSH signature
                 of it); a bare report is read as an unsigned one. Per host the report with the
                 newest checked_at wins (ISO 8601; no offset counts as UTC; on a tie or an
                 unreadable time, --reports).
  --rig-keys FILE  the fleet's list of rig keys (git's allowed-signers format, one line per rig
                 name, namespaces="vllm-dual-fast-report"; each enrolment adds its rig's line).
                 Each pulled upload must verify as the rig it claims to be: the file name it was
                 uploaded under (DIR/<rig>.json) is that rig, its signature must verify with
                 `ssh-keygen -Y verify -I <rig> -n vllm-dual-fast-report` against FILE, and the
                 signed report's "host" must be <rig>. An unsigned, mis-signed or misnamed
                 upload, or one of a rig not in FILE, gets no row and no state: it is listed
                 apart ("not_verified": {file, rig, why}; "not verified: <why>" after the
                 footer); a rig of --hosts with nothing else is "no-report", saying why. A FILE
                 that does not exist verifies nothing. Without --rig-keys the uploads are read
                 unverified, and the footer says so loudly (rows "verified": false; a report
                 whose "host" is not its file name is then kept under the file name and
                 flagged: host_mismatch, its reason, a footer line).
  --state-dir DIR  the rollout's state, one file per rig, DIR/<host>.json holding that rig's
                 object as playbooks/tasks/rollout_record.yml writes it: {host, state, reason,
                 release, previous_release, previous_speed, at, history}. Its "host" key, else
                 the file name, names the rig; state is one of STATES; every key is optional
                 and at and history are not read. A rig in the state but without a report still
                 gets its row; a rig with a report but no state is "healthy" or "unhealthy" as its
                 report says, "pull-refused" when the pull run that uploaded it refused the
                 ref's commit (unsigned, or no allowed signer: the row names commit and signer),
                 "pull-failed" when that run failed (before the switch: its reason and next try;
                 or the release failed and was rolled back), or "stale" (--stale-after).
                 With a state, only the rigs in it or in --hosts are taken from --reports (the
                 folder keeps reports of rigs no longer rolled out to); --pulled rigs are all
                 kept.
  --hosts A,B    every rig of the rollout (the inventory's rig3090 group): each gets a row even
                 without a state file or a report ("no-report"); with --state-dir, a listed rig
                 with no state file says in its reason that the rollout recorded nothing for it.
                 With a list, only its rigs are rows and counted: a report (pushed or pulled) or
                 a state of any other rig, such as one a test run or another inventory left in
                 the folder, is listed apart as "not in this inventory" ("not_in_inventory" in
                 the JSON, a table after the footer) and counts in no state and not in the
                 upstream-fixed line. Without a list (no --hosts, or an empty one) the folders
                 are the inventory, as before: every rig found there is a row and is counted
                 (with --state-dir, the pushed reports of rigs in no state are left out).

  --stale-after SECONDS  a pulled rig without a rollout state whose newest news is older is
                 "stale" (counted in the footer, with a line naming them): the news is the
                 report's checked_at, or the pull run's "at" when that run was refused or failed.
                 Default 4200: two runs of the pull timer (every 30 minutes) plus its 600 s
                 random delay; a fleet with another schedule passes its own.
  --ref-commit COMMIT  the commit the fleet's pull ref names now (`git rev-parse
                 fleet-live^{commit}` in the fleet repository): every pulled rig whose applied
                 commit is another (a frozen or steered host, a refusal, a failure, a rig not
                 yet at it) is flagged ("off_ref") and named before the table. A report of an
                 older pull script without applied_commit counts its commit as applied when its
                 state was applied or unchanged.
  --rollout FILE what the rollout was, as playbooks/tasks/rollout_info.yml writes it: {started_at,
                 ended_at (absent while it runs), controller_commit, controller_dirty, target:
                 {image, model, model_revision, patch_enabled}, canary: [hosts], batches: [[hosts]],
                 stop_reason}. Its lines come first in the Markdown (what was rolled out, from
                 which controller commit, when, and the outcome in one sentence: rollout_outcome).
                 A file that does not exist counts as no rollout (a report without those lines).

Output: OUT/fleet-<UTC time, YYYYmmddTHHMMSSZ>.json ({"generated_at", "inputs", "ref_commit",
"rollout", "outcome", "rows", "footer", "not_in_inventory", "not_verified"}) and .md (the
rollout's lines, the rigs whose gates did not see, the pulled rigs off the ref, a table, its
footer, the rigs listed apart, then the uploads not verified), written whole (no half-written
file); their paths on stderr; --print prints the Markdown on stdout. One row per rig:
host, state, release (the report's, else the state's), image and vLLM version (the report's),
FlashInfer version (the report's patch_report), patch (patch_class of the report's patch_status:
patched, upstream-fixed, pinned, or the status itself such as drift or unknown), decode tokens/s at
c=1 and at c=4 now and under the previous release (smoke.py --speed figures: the report's
smoke.speed; "previous_speed" of the state), MTP's mean acceptance length and acceptance rate
over the speed run (the report's "mtp"), the switch's downtime in seconds (the report's
"downtime_s": the old container stopping to the new one healthy; empty when nothing was
recreated), the number of kernel Xid lines, the gates of its report that did not see
("gates_unseen": cannot-judge or warn in the report's "judged", such as a kernel log it could not
read or a race check a canary could not run; every such rig is also named before the table),
and a one-line reason
(the state's, else the failures of an unhealthy report). The footer counts rigs per state and says
whether every reachable rig (state not "unreachable" or "lost") reports upstream-fixed, in which
case the patch can be dropped fleet-wide. A "lost" rig stopped answering during its switch: it may
serve either release, so its row's report may be old.

Exit codes: 0 written (whatever the rigs' states); 2 bad input: --reports or the state folder
missing or unreadable, --pulled not a folder, a state file that is not a JSON object, an
unknown state name; 1 unexpected (such as --out not writable).
"""

import argparse
import datetime
import glob
import json
import os
import sys

# The signed uploads' reading and checks: a sibling in files/, copied together.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from signed_reports import (  # noqa: E402
    BadInput,
    _text,
    one_line,
    parse_upload,
    read_rig_keys,
    ssh_verify,
    verify_upload,
)

EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT = 0, 1, 2
STATES = ("updated", "unchanged", "rolled-back", "failed", "lost", "not-reached", "unreachable",
          "staging-failed", "maintained", "maintenance-failed", "maintenance-waiting")
# Rigs that did not answer at the end of the rollout: what they serve is not known now.
UNANSWERED = ("unreachable", "lost")
# Without a rollout state: what the rig's own report says.
DERIVED_STATES = ("healthy", "unhealthy", "no-report", "pull-failed", "pull-refused", "stale")
# A pulled rig uploads on every timer run (every 30 minutes, plus up to 600 s of random delay):
# two runs missed, and its newest report is stale.
STALE_AFTER_S = 2 * 1800 + 600
# The pull script's states (its "pull": {state, ...}) that are a refusal, or a failure.
# "expired": the fleet's signed Valid-Until passed (a frozen ref, or one not re-signed).
PULL_REFUSED = ("refused", "expired")
# Pull states whose commit is the one applied (a report from before "applied_commit" was sent).
PULL_ON_COMMIT = ("applied", "unchanged")
PULL_FAILED = ("failed", "release-failed")
PATCH_CLASSES = {"patched": "patched", "already-patched": "patched",
                 "upstream-fixed": "upstream-fixed", "unpatched": "pinned"}
# The rollout's own record beside the rigs' reports (rollout_info.yml): not a rig's report.
ROLLOUT_FILE = "rollout.json"
NONE = "—"
UNVERIFIED_LINE = ("Pulled reports NOT verified (no --rig-keys given): any rig, or anyone who "
                   "can write to the report share, may have written them")


# --- small pure functions ----------------------------------------------------------------------

def parse_time(text):
    """An aware UTC datetime from an ISO 8601 text (no offset: UTC; a trailing Z is fine);
    None when it is not one."""
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def newer(candidate: dict, current) -> bool:
    """Whether report `candidate` replaces `current` (None: nothing yet): a strictly newer
    checked_at; an unreadable time never wins over a readable one."""
    if current is None:
        return True
    new, old = parse_time(candidate.get("checked_at")), parse_time(current.get("checked_at"))
    return new is not None and (old is None or new > old)


def merge_reports(*sources) -> dict:
    """{host: report} from several {host: report} dicts, earliest source first: per host the
    newest checked_at wins, a tie keeps the earlier source's."""
    merged = {}
    for source in sources:
        for host, report in source.items():
            if newer(report, merged.get(host)):
                merged[host] = report
    return merged


def patch_class(status) -> str:
    """patched / already-patched -> patched, upstream-fixed -> upstream-fixed, unpatched ->
    pinned; nothing known -> unknown; any other patcher status (drift, reverted, absent, error)
    stays itself."""
    if not isinstance(status, str) or not status.strip():
        return "unknown"
    return PATCH_CLASSES.get(status.strip(), status.strip())


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _level_rate(level):
    """tokens/s of one level of smoke.py's speed: {"tokens_per_s": x, ...} or a bare number."""
    if isinstance(level, dict):
        return _number(level.get("tokens_per_s"))
    return _number(level)


def speed_figures(speed) -> dict:
    """{"c1", "c4", "c4_concurrency"} (tokens/s or None) from smoke.py's "speed" object
    ({"c1": {...}, "cN": {...}, "concurrency": N}), a whole smoke report holding one, or a plain
    {"c1": x, "c4": y}. c4 is the cN level; c4_concurrency says which N it was measured at."""
    if isinstance(speed, dict) and isinstance(speed.get("speed"), dict):
        speed = speed["speed"]
    if not isinstance(speed, dict):
        return {"c1": None, "c4": None, "c4_concurrency": None}
    if "c4" in speed:
        c4, n = _level_rate(speed["c4"]), 4
    else:
        c4 = _level_rate(speed.get("cN"))
        n = speed.get("concurrency") if isinstance(speed.get("concurrency"), int) else None
    return {"c1": _level_rate(speed.get("c1")), "c4": c4,
            "c4_concurrency": n if c4 is not None else None}


def speed_cell(now, before, concurrency=None, nominal=None) -> str:
    """'41.2 (was 43.0, -4.2%)'; a level measured at another concurrency than the column's
    (nominal) is named, '88.0 at c=8'."""
    at = f" at c={concurrency}" if nominal and concurrency and concurrency != nominal else ""
    text = NONE if now is None else f"{now:.1f}{at}"
    if before is None:
        return text
    if now is None or before == 0:
        return f"{text} (was {before:.1f})"
    return f"{text} (was {before:.1f}, {(now - before) / before * 100:+.1f}%)"


# The health report shapes this reads (files/schemas/health-report.schema.json): 1 (no
# "schema_version": failures were lines of text) and 2 (failures are {check, result, line,
# advice}). A report of any other version is shown as such and read no further.
KNOWN_REPORT_VERSIONS = (1, 2)


def report_version(report):
    """The report's schema version: 1 without one, else the value (an int, or its text)."""
    version = report.get("schema_version", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else str(version)


def as_known(report):
    """The report when its schema version is one this reads; else only its host, where it came
    from and why it is not read (as an unreadable file is), never misread as a known one."""
    if not report or report.get("_unreadable"):
        return report
    version = report_version(report)
    if version in KNOWN_REPORT_VERSIONS:
        return report
    kept = {k: report[k] for k in ("host", "_from", "_host_mismatch") if k in report}
    return {**kept, "_unreadable": f"report of unknown schema version {version} (a newer role "
                                   "wrote it?): not read"}


def failures_reason(failures) -> str:
    """An unhealthy report's failures on one line, by field: "[check] line" each (version 2);
    a version 1 failure is its own line of text."""
    return one_line([f"[{f.get('check', '?')}] {f.get('line', '')}" if isinstance(f, dict)
                     else str(f) for f in failures or []])


def _healthy(report):
    value = report.get("healthy")
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return value if isinstance(value, bool) else None


def _pull(report) -> dict:
    """The pull run's tag on an uploaded report ({ref, commit, rc, at}; empty when pushed)."""
    pull = report.get("pull") if report else None
    return pull if isinstance(pull, dict) else {}


def _pull_failed(report) -> bool:
    pull = _pull(report)
    if pull.get("state") in PULL_FAILED:
        return True
    rc = pull.get("rc")
    return (pull.get("state") not in PULL_REFUSED and isinstance(rc, int)
            and not isinstance(rc, bool) and rc != 0)


def _pull_refused(report) -> bool:
    return _pull(report).get("state") in PULL_REFUSED


def _pulled(report) -> bool:
    return bool(report) and (report.get("_from") == "pulled" or bool(_pull(report)))


def news_of(report):
    """(when, what) of a pulled rig's newest news: its health check's checked_at, or the pull
    run's own "at" when that run was refused or failed (it checked no health, but the rig is
    alive); when is None if that time cannot be read."""
    what = "pull run" if _pull_refused(report) or _pull_failed(report) else "health check"
    return parse_time(_pull(report).get("at") if what == "pull run"
                      else report.get("checked_at")), what


def staleness(report, now=None, stale_after=STALE_AFTER_S):
    """(age in seconds or None, what) when a pulled rig's newest news is older than
    `stale_after` seconds before `now`, else None. The news is the report's checked_at (its
    health), or the pull run's own "at" when that run was refused or failed (it checked no
    health, but the rig is alive). A pushed report, or no `now`, is never stale."""
    if now is None or not _pulled(report):
        return None
    when, what = news_of(report)
    age = None if when is None else (now - when).total_seconds()
    if age is not None and age <= stale_after:
        return None
    return age, what


def state_of(report, state, now=None, stale_after=STALE_AFTER_S) -> str:
    """The rig's state: the rollout's when it has one, else from its report: stale (a pulled rig
    with no news for `stale_after` seconds), refused or failed pull (a failed one has rolled
    back, or never switched: its report is the release before), unhealthy or healthy."""
    if isinstance(state, dict) and state.get("state"):
        return state["state"]
    if not report or report.get("_unreadable"):
        return "no-report"
    if staleness(report, now, stale_after):
        return "stale"
    if _pull_refused(report):
        return "pull-refused"
    if _pull_failed(report):
        return "pull-failed"
    return "unhealthy" if _healthy(report) is False else "healthy"


def applied_commit(report):
    """The commit a pulled rig serves from: the pull run's applied_commit, else (an older pull
    script) its commit when that run applied it or found nothing new; None when unknown."""
    pull = _pull(report)
    if pull.get("applied_commit") is not None:
        return _text(pull.get("applied_commit"))
    return _text(pull.get("commit")) if pull.get("state") in PULL_ON_COMMIT else None


def off_ref(report, ref_commit) -> object:
    """Whether a pulled rig applied another commit than the one the fleet's ref names now
    (--ref-commit): True or False; None for a pushed rig or without a ref commit."""
    if not ref_commit or not _pulled(report):
        return None
    return applied_commit(report) != ref_commit


def pull_reason(report) -> str:
    """One line on the pull run that uploaded `report`: refused (commit, signer, why), failed
    before the switch (why, next try), or the release failed (what it still serves)."""
    pull = _pull(report)
    commit = str(pull.get("commit") or "?")[:12]
    serving = _text(report.get("release")) or "nothing"
    if _pull_refused(report):
        return (f"refused {pull.get('ref')} at {commit}: {pull.get('reason') or 'not allowed'} "
                f"(signer: {pull.get('signer') or 'none'}); serving {serving}")
    if pull.get("state") == "failed":
        retry = f"; next try {pull['next_try']}" if pull.get("next_try") else ""
        return (f"pull of {pull.get('ref')} at {commit} failed before the switch: "
                f"{pull.get('reason') or 'no reason given'}{retry}; serving {serving}")
    return (f"pull of {pull.get('ref')} at {commit} failed (exit {pull.get('rc')}); "
            f"serving {serving}")


def _ago(seconds) -> str:
    if seconds is None:
        return "at no readable time"
    return f"{seconds / 3600:.1f} h ago" if seconds >= 3600 else f"{seconds / 60:.0f} min ago"


NO_STATE = "the rollout recorded no state for this rig"
# A gate's result in a health report ("judged") that means it did not see: it could not look
# (cannot-judge: a kernel log it could not read, counters gone) or could not run (warn: a race
# check on a canary whose `auto` mode let it pass without running).
UNSEEING = ("cannot-judge", "warn")


def gates_unseen(report) -> list:
    """The gates of a health report that did not see, as {gate, result, reason}, by gate name
    (its "judged" entries whose result is in UNSEEING)."""
    judged = report.get("judged") if isinstance(report, dict) else None
    if not isinstance(judged, dict):
        return []
    return [{"gate": gate.replace("_", "-"), "result": said.get("result"),
             "reason": one_line(said.get("reason") or "", 100)}
            for gate, said in sorted(judged.items())
            if isinstance(said, dict) and said.get("result") in UNSEEING]


def unseen_lines(rows) -> list:
    """The Markdown's lines, before the table, that name every rig with a gate that did not
    see: a passed canary whose kernel log or race check was blind must not read as proven."""
    rigs = [r for r in rows if r.get("gates_unseen")]
    if not rigs:
        return []
    return ([f"**Gates that did not see on {len(rigs)} rig{'s' if len(rigs) != 1 else ''}:**  "]
            + [f"- {r['host']}: " + "; ".join(f"{g['gate']} {g['result']} ({g['reason']})"
                                               for g in r["gates_unseen"]) for r in rigs]
            + [""])


def off_ref_lines(rows, ref_commit) -> list:
    """Markdown lines before the table naming every pulled rig not on the ref's commit."""
    rigs = [r for r in rows if r.get("off_ref")]
    if not rigs:
        return []
    return ([f"**Not on the ref's commit {ref_commit[:12]} ({len(rigs)} pulled "
             f"rig{'s' if len(rigs) != 1 else ''}):**  "]
            + [f"- {r['host']}: applied "
               f"{(r['pull_applied_commit'] or '')[:12] or 'nothing known'}, "
               f"pull {r['pull_state'] or 'state unknown'}" for r in rigs]
            + [""])


def row_for(host: str, report=None, state=None, missing_state=False, now=None,
            stale_after=STALE_AFTER_S, unverified=None, ref_commit=None) -> dict:
    """One rig's row from its merged report (None: none) and its rollout state (None: none);
    missing_state: the rig belongs to a rollout that recorded nothing for it (said in the
    reason when nothing else is). now: the time pulled rigs' staleness is judged at (None:
    none is stale). unverified: why the rig's own upload was not verified (it is not the
    report then). ref_commit: the commit the fleet's ref names now (--ref-commit): a pulled
    rig on another is flagged ("off_ref")."""
    report = as_known(report or {})
    state = state or {}
    stale = None if state.get("state") else staleness(report, now, stale_after)
    patch_report = report.get("patch_report") if isinstance(report.get("patch_report"),
                                                            dict) else {}
    smoke = report.get("smoke") if isinstance(report.get("smoke"), dict) else {}
    speed = speed_figures(smoke.get("speed"))
    before = speed_figures(state.get("previous_speed"))
    raw_patch = _text(report.get("patch_status")) or _text(patch_report.get("status"))
    mtp = report.get("mtp") if isinstance(report.get("mtp"), dict) else {}
    xid = report.get("kernel_xid_lines")
    reason = _text(state.get("reason"))
    if reason is None and report.get("_unreadable"):
        reason = report["_unreadable"]
    elif reason is None and stale:
        age, what = stale
        last = ("pull " + pull_reason(report) if what == "pull run" else
                f"{'unhealthy' if _healthy(report) is False else 'healthy'}, serving "
                f"{_text(report.get('release')) or 'nothing'}")
        reason = (f"stale: newest {what} {_ago(age)} (over {stale_after:.0f} s); "
                  f"last known: {last}")
    elif reason is None and (_pull_refused(report) or _pull_failed(report)):
        reason = pull_reason(report)
    elif reason is None and report and _healthy(report) is False:
        failures = report.get("failures")
        reason = failures_reason(failures) if failures else "unhealthy (no failure named)"
    if reason is None and missing_state and not state:
        reason = NO_STATE
    if unverified:
        reason = (f"uploaded report not verified: {unverified}"
                  + (f"; {reason}" if reason else ""))
    claimed = report.get("_host_mismatch")
    if claimed:
        reason = (f"report names host {claimed!r}, not the {host!r} it was uploaded as"
                  + (f"; {reason}" if reason else ""))
    return {
        "host": host,
        "state": state_of(report, state, now, stale_after),
        "release": _text(report.get("release")) or _text(state.get("release")),
        "previous_release": _text(state.get("previous_release")),
        "image": _text(report.get("image")),
        "vllm_version": _text(report.get("vllm_version")),
        "flashinfer_version": _text(patch_report.get("flashinfer_version")),
        "patch": patch_class(raw_patch),
        "patch_status": raw_patch,
        "tokens_per_s_c1": speed["c1"],
        "previous_tokens_per_s_c1": before["c1"],
        "tokens_per_s_c4": speed["c4"],
        "previous_tokens_per_s_c4": before["c4"],
        "c4_concurrency": speed["c4_concurrency"],
        "xid_count": len(xid) if isinstance(xid, list) else None,
        # MTP over the speed run (smoke.py's spec-decode counters), and the switch's downtime.
        "mtp_acceptance_rate": _number(mtp.get("acceptance_rate")),
        "mtp_acceptance_length": _number(mtp.get("mean_acceptance_length")),
        "downtime_s": _number(report.get("downtime_s")),
        # The LAN bind over TLS: where, and the certificate clients pin (the report's).
        "lan_bind": _text(report.get("lan_bind")),
        "tls_fingerprint_sha256": _text(report.get("tls_fingerprint_sha256")),
        "gates_unseen": gates_unseen(report),
        # The rig's envelope (playbooks/fit.yml), as its report shows it: {} when never fitted.
        "envelope": envelope_of(report),
        "healthy": _healthy(report) if report else None,
        "checked_at": _text(report.get("checked_at")),
        "report_from": report.get("_from"),
        "pull_commit": _text(_pull(report).get("commit")),
        "pull_state": _text(_pull(report).get("state")),
        "pull_signer": _text(_pull(report).get("signer")),
        "pull_applied_commit": applied_commit(report) if _pulled(report) else None,
        "pull_valid_until": _text(_pull(report).get("valid_until")),
        # A pulled rig that applied another commit than the ref's (frozen, refused, failed,
        # behind): None when pushed or without --ref-commit.
        "off_ref": off_ref(report, ref_commit),
        "stale": bool(stale),
        "host_mismatch": _text(claimed),
        # A pulled report: True verified as this rig's (--rig-keys), False read unverified;
        # None: pushed (the controller fetched it itself) or no report.
        "verified": report.get("_verified") if _pulled(report) else None,
        "reason": one_line(reason) if reason else None,
    }


def footer(rows) -> dict:
    """Rigs per state (STATES, then DERIVED_STATES order: a row's state is always one of them,
    see check_state and state_of), and whether the patch can be dropped: every reachable rig
    (state not unreachable or lost, UNANSWERED) reports upstream-fixed."""
    counts = {}
    for name in STATES + DERIVED_STATES:
        n = sum(1 for r in rows if r["state"] == name)
        if n:
            counts[name] = n
    reachable = [r for r in rows if r["state"] not in UNANSWERED]
    holding = [r for r in reachable if r["patch"] != "upstream-fixed"]
    droppable = bool(reachable) and not holding
    lines = [f"{len(rows)} rig{'s' if len(rows) != 1 else ''}: "
             + (", ".join(f"{n} {name}" for name, n in counts.items()) or "none")]
    unanswered = len(rows) - len(reachable)
    kinds = " and ".join(f"{n} {name}" for name in UNANSWERED
                         for n in [sum(1 for r in rows if r["state"] == name)] if n)
    if droppable:
        lines.append("Every reachable rig reports upstream-fixed: the patch can be dropped "
                     "fleet-wide" + (f" ({kinds} rig{'s' if unanswered != 1 else ''} not "
                                     "counted)." if unanswered else "."))
    elif reachable:
        lines.append(f"The patch stays: {len(holding)} of {len(reachable)} reachable rigs do not "
                     "report upstream-fixed (" + ", ".join(f"{r['host']} {r['patch']}"
                                                           for r in holding) + ").")
    pinned = [r["host"] for r in rows if r["patch"] == "pinned"]
    if pinned:
        lines.append("Serving with FlashInfer's plan buffer still pinned (vllm#40756 exposed): "
                     + ", ".join(pinned) + ".")
    stale = [r["host"] for r in rows if r["state"] == "stale"]
    if stale:
        lines.append(f"Stale (pulled rigs with no news within the threshold: off, offline or "
                     f"no longer pulling): {len(stale)}: " + ", ".join(stale) + ".")
    mismatched = [r["host"] for r in rows if r.get("host_mismatch")]
    if mismatched:
        lines.append("Reports naming another host than the one they were uploaded as: "
                     + ", ".join(mismatched) + ".")
    unverified = [r["host"] for r in rows if r.get("verified") is False]
    if unverified:
        lines.append(f"**{UNVERIFIED_LINE}: " + ", ".join(unverified) + ".**")
    return {"rigs": len(rows), "states": counts, "reachable": len(reachable),
            "patch_droppable": droppable, "patch_holding": [r["host"] for r in holding],
            "pinned": pinned, "stale": len(stale), "host_mismatch": mismatched,
            "pulled_unverified": unverified, "lines": lines}


CHANGED = ("updated", "maintained")
STOPPING = ("rolled-back", "failed", "lost", "maintenance-failed")


def changed_word(rollout) -> str:
    """What a switch did to a rig in this rollout: `updated` (a release), or `maintained` (a
    maintenance run, playbooks/maintain.yml: kernel and driver)."""
    return "maintained" if rollout.get("action") == "maintenance" else "updated"


def rollout_outcome(rollout, rows, counts) -> str:
    """How the rollout ended, in one sentence, from its record, the rigs' rows and the footer's
    counts per state: still running, stopped at the canary or a batch (the first rig of the
    earliest batch that rolled back, failed or was lost, with its reason), every reachable rig
    updated (each one updated or unchanged), or ended with some rigs neither."""
    rollout = rollout if isinstance(rollout, dict) else {}
    by_host = {row["host"]: row for row in rows}
    batches = [b for b in (rollout.get("batches") or []) if isinstance(b, list)]
    if not rollout.get("ended_at"):
        switched = sum(1 for row in rows if row["state"] in CHANGED + STOPPING)
        return f"Still running: {switched} of {len(rows)} rigs switched so far."
    for index, batch in enumerate(batches):
        bad = [by_host[h] for h in batch if h in by_host and by_host[h]["state"] in STOPPING]
        if bad:
            where = "the canary" if index == 0 else f"batch {index}"
            first = bad[0]
            why = f": {one_line(first['reason'], 100)}" if first["reason"] else ""
            return (f"Stopped at {where} {first['host']} ({first['state']}{why}); rigs not "
                    "reached keep serving what they served.")
    if rollout.get("stop_reason"):
        return f"Stopped: {one_line(rollout['stop_reason'], 140)}."
    if not batches:
        return "Nothing switched: no rig was staged."
    word = changed_word(rollout)
    left = ", ".join(f"{n} {s}" for s, n in counts.items() if s != word)
    detail = f"{counts.get(word, 0)} {word}" + (f"; {left}" if left else "")
    done = all(row["state"] in (word, "unchanged") + UNANSWERED for row in rows)
    return (f"Every reachable rig {word} ({detail})." if done
            else f"Ended with rigs not {word} ({detail}).")


def rollout_lines(rollout, outcome) -> list:
    """The Markdown's first lines: what was rolled out, from which controller commit, when."""
    if not isinstance(rollout, dict) or not rollout:
        return []
    target = rollout.get("target") if isinstance(rollout.get("target"), dict) else {}
    patch = target.get("patch_enabled")
    patch = {True: "on", False: "off"}.get(patch, str(patch))
    commit = str(rollout.get("controller_commit") or "unknown")[:12]
    dirty = " (with uncommitted changes)" if rollout.get("controller_dirty") else ""
    image, model = target.get("image") or NONE, target.get("model") or NONE
    what = (f"Rolled out: image `{image}`, model `{model}` at "
            f"`{target.get('model_revision') or NONE}`, FlashInfer patch {patch}.  ")
    if changed_word(rollout) == "maintained":
        what = "Maintenance: kernel, NVIDIA modules and driver moved together, rig by rig.  "
    return [f"**{outcome}**", "", what,
            f"From controller commit `{commit}`{dirty}; started "
            f"{rollout.get('started_at') or NONE}, ended {rollout.get('ended_at') or 'not yet'}.",
            ""]


def _cell(value) -> str:
    text = NONE if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


COLUMNS = ("Host", "State", "Release", "Image", "vLLM", "FlashInfer", "Patch", "tok/s c=1",
           "tok/s c=4", "MTP", "Down s", "Xid", "Reason")


def mtp_cell(length, rate) -> object:
    """'2.77 (44 %)': mean acceptance length and the share of draft tokens accepted."""
    if length is None:
        return None
    return f"{length:.2f}" + (f" ({rate * 100:.0f} %)" if rate is not None else "")


def table_row(row: dict) -> list:
    return [row["host"], row["state"], row["release"], row["image"], row["vllm_version"],
            row["flashinfer_version"], row["patch"],
            speed_cell(row["tokens_per_s_c1"], row["previous_tokens_per_s_c1"]),
            speed_cell(row["tokens_per_s_c4"], row["previous_tokens_per_s_c4"],
                       row["c4_concurrency"], 4),
            mtp_cell(row["mtp_acceptance_length"], row["mtp_acceptance_rate"]),
            row["downtime_s"], row["xid_count"], row["reason"] or ""]


APART_COLUMNS = ("Host", "State", "Release", "Patch", "Report from", "Checked at", "Reason")


def envelope_of(report) -> dict:
    """The envelope a rig's report shows (max_num_seqs, max_model_len, max_num_batched_tokens,
    kv_cache_memory_bytes, measured_at, report), {} when none: never fitted, or a report from
    before the field."""
    envelope = report.get("envelope")
    if not isinstance(envelope, dict):
        return {}
    keys = ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes",
            "measured_at", "report")
    return {key: envelope.get(key) for key in keys if envelope.get(key) is not None}


def envelope_lines(rows) -> list:
    """Markdown lines after the footer: each rig's envelope (what its fit measured it holds), and
    the rigs never fitted, named."""
    if not any(r.get("envelope") for r in rows):
        return []
    out = ["", "Envelopes (playbooks/fit.yml: the most sequences and context each rig holds):", ""]
    for row in rows:
        envelope = row.get("envelope") or {}
        if not envelope:
            out.append(f"- {row['host']}: not fitted")
            continue
        pinned = envelope.get("kv_cache_memory_bytes")
        out.append(
            f"- {row['host']}: {envelope.get('max_num_seqs')} sequences x "
            f"{envelope.get('max_model_len'):,} tokens, {envelope.get('max_num_batched_tokens'):,} "
            f"batched, KV pool "
            + (f"pinned at {pinned / 2**30:.2f} GiB" if pinned else "profiled at each start")
            + f"; measured {envelope.get('measured_at')} ({envelope.get('report')})")
    return out


def tls_lines(rows) -> list:
    """Markdown lines after the footer: each LAN rig's certificate fingerprint, for clients to
    pin (curl --cacert inventory/tls/<rig>.pem checks the same certificate)."""
    lan = [r for r in rows if r.get("lan_bind")]
    if not lan:
        return []
    return (["", "LAN binds over TLS (certificate SHA-256, for clients to pin):", ""]
            + [f"- {r['host']} {r['lan_bind']}: {r['tls_fingerprint_sha256'] or 'NOT READ'}"
               for r in lan])


def render_markdown(fleet: dict) -> str:
    """The Markdown report: a title, one table row per rig, the footer's lines, then the rigs
    not in this inventory, apart."""
    out = [f"# Fleet report {fleet['generated_at']}", ""]
    out += rollout_lines(fleet.get("rollout"), fleet.get("outcome"))
    out += unseen_lines(fleet["rows"])
    out += off_ref_lines(fleet["rows"], fleet.get("ref_commit") or "")
    out += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in fleet["rows"]:
        cells = [_cell(c) for c in table_row(row)]
        cells[-1] = cells[-1] if row["reason"] else ""
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += [f"{line}  " if i < len(fleet["footer"]["lines"]) - 1 else line
            for i, line in enumerate(fleet["footer"]["lines"])]
    apart = fleet.get("not_in_inventory") or []
    if apart:
        out += ["", f"{len(apart)} rig{'s' if len(apart) != 1 else ''} not in this inventory "
                "(not among the rollout's rigs), listed apart and not counted above:", "",
                "| " + " | ".join(APART_COLUMNS) + " |", "|" + "---|" * len(APART_COLUMNS)]
        for row in apart:
            cells = [_cell(c) for c in (row["host"], row["state"], row["release"], row["patch"],
                                        row["report_from"], row["checked_at"])]
            out.append("| " + " | ".join(cells + [_cell(row["reason"]) if row["reason"]
                                                  else ""]) + " |")
    out += tls_lines(fleet["rows"])
    out += envelope_lines(fleet["rows"])
    forged = fleet.get("not_verified") or []
    if forged:
        out += ["", f"{len(forged)} uploaded report{'s' if len(forged) != 1 else ''} not "
                "verified, listed apart and counted nowhere (no row, no state):", "",
                "| File | Claimed rig | Why |", "|---|---|---|"]
        out += [f"| {_cell(f['file'])} | {_cell(f['rig'])} | "
                f"{_cell('not verified: ' + f['why'])} |" for f in forged]
    return "\n".join(out) + "\n"


# --- inputs and outputs ------------------------------------------------------------------------

def report_files(folder: str, label: str, missing_ok: bool = False) -> tuple:
    """([(path, file name, rig name from the file name)], notes) of the reports in folder
    (*.json, not the fleet report's own files). A folder that does not exist: BadInput, or
    nothing (and a note) when missing_ok."""
    if not os.path.isdir(folder):
        if missing_ok and not os.path.exists(folder):
            return [], [f"{label}: {folder} does not exist (yet): no reports there"]
        raise BadInput(f"{label} folder {folder} does not exist or is not a folder")
    files = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)
        if not (name.startswith("fleet-") or name == ROLLOUT_FILE):
            files.append((path, name, name[:-len(".json")]))
    return files, []


def load_report_dir(folder: str, label: str, missing_ok: bool = False) -> tuple:
    """({host: report}, notes) from folder/*.json; each report gains '_from' = label. A file
    that is not JSON becomes {'_unreadable': why} under its file name's host; a JSON object
    without a host, and fleet-*.json, are skipped (named in notes). A folder that does not
    exist: BadInput, or nothing when missing_ok."""
    files, notes = report_files(folder, label, missing_ok)
    reports = {}
    for path, name, stem in files:
        try:
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
        except (OSError, ValueError) as exc:
            report = {"_unreadable": f"report {name} unreadable: {type(exc).__name__}"}
            host = stem
        else:
            host = report.get("host") if isinstance(report, dict) else None
            if not isinstance(host, str) or not host:
                notes.append(f"{label}: {name} skipped (not a rig report: no host)")
                continue
            if host != stem:
                # The file name is where the rig was let upload (its own URL): a report naming
                # another rig is kept under the file's name, flagged, never as that other rig.
                report["_host_mismatch"] = host
                host = stem
        report["_from"] = label
        if newer(report, reports.get(host)):
            reports[host] = report
    return reports, notes


def load_pulled_dir(folder: str, rig_keys=None, verify=ssh_verify) -> tuple:
    """({rig: report}, notes, not_verified) from folder/*.json, each a pulled rig's upload
    named for the rig it claims to be. rig_keys: read_rig_keys's (path, names) to verify
    each against (verify_upload): those that fail are listed in not_verified ({file, rig,
    why}), never as reports. None: uploads read unverified (flagged "_verified": False, and a
    report naming another host than its file kept under the file name, flagged)."""
    files, notes = report_files(folder, "pulled", missing_ok=True)
    reports, apart = {}, []
    for path, name, rig in files:
        try:
            with open(path, "rb") as f:
                upload = parse_upload(f.read())
        except OSError as exc:
            upload = {"text": None, "report": None, "signature": None,
                      "why": f"unreadable: {type(exc).__name__}"}
        if rig_keys is not None:
            report, why = verify_upload(rig, upload, *rig_keys, verify=verify)
            if why:
                apart.append({"file": name, "rig": rig, "why": why})
                continue
            report = dict(report, _verified=True)
        else:
            report = upload["report"]
            if report is None:
                report = {"_unreadable": f"report {name} unreadable: {upload['why']}"}
            elif not isinstance(report.get("host"), str) or not report.get("host"):
                notes.append(f"pulled: {name} skipped (not a rig report: no host)")
                continue
            elif report["host"] != rig:
                report = dict(report, _host_mismatch=report["host"])
            report = dict(report, _verified=False)
        report["_from"] = "pulled"
        if newer(report, reports.get(rig)):
            reports[rig] = report
    return reports, notes, apart


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise BadInput(f"{what} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise BadInput(f"{what} {path}: not JSON ({exc})") from exc


def load_state_dir(folder: str) -> dict:
    """{host: state dict} from folder/<host>.json, one rig's state object each; BadInput when
    the folder is missing, a file is not a JSON object or names an unknown state."""
    if not os.path.isdir(folder):
        raise BadInput(f"state folder {folder} does not exist or is not a folder")
    state = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        value = _read_json(path, "state file")
        if not isinstance(value, dict):
            raise BadInput(f"state file {path}: expected an object, got {type(value).__name__}")
        check_state(value, path)
        host = value.get("host")
        state[host if isinstance(host, str) and host else
              os.path.basename(path)[:-len(".json")]] = value
    return state


def check_state(value: dict, path: str) -> None:
    """BadInput unless the rig's state name is absent (null) or one of STATES: so every row's
    state is one of STATES (the rollout's) or DERIVED_STATES (state_of, without one)."""
    name = value.get("state")
    if name is not None and name not in STATES:
        raise BadInput(f"state file {path}: unknown state {name!r} "
                       f"(one of {', '.join(STATES)})")


def split_hosts(found, hosts) -> tuple:
    """(the rigs that get a row, the rigs listed apart), each sorted: with a rig list `hosts`,
    its rigs and the others `found` (in reports or states); without one (empty), every rig
    found and none apart."""
    listed = set(hosts)
    if not listed:
        return sorted(set(found)), []
    return sorted(listed), sorted(set(found) - listed)


def build_fleet(reports: dict, state: dict, generated_at: str, inputs=None, hosts=(),
                rollout=False, record=None, now=None, stale_after=STALE_AFTER_S,
                not_verified=(), ref_commit=None) -> dict:
    """The fleet report: one row per rig of `hosts` (the rollout's rigs), sorted by host, and
    the rigs of the reports or the state outside it listed apart ("not_in_inventory", not in
    the footer); without `hosts`, one row per rig in the reports or the state. rollout: the
    state is a rollout's, so a rig of `hosts` missing from it says so. record: what the rollout
    was (--rollout), giving "rollout" and its "outcome". now, stale_after: pulled rigs with no
    news for stale_after seconds before now are "stale" (now None: none is). not_verified:
    the uploads that did not verify (load_pulled_dir's): listed apart, in no row's state.
    ref_commit: the commit the fleet's ref names now; pulled rigs on another are flagged."""
    forged = {f["rig"]: f["why"] for f in not_verified}
    inside, apart = split_hosts(set(reports) | set(state), hosts)
    rows = [row_for(h, reports.get(h), state.get(h), missing_state=rollout and bool(hosts),
                    now=now, stale_after=stale_after,
                    unverified=None if (reports.get(h) or {}).get("_from") == "pulled"
                    else forged.get(h), ref_commit=ref_commit) for h in inside]
    counted = footer(rows)
    return {"generated_at": generated_at, "inputs": inputs or {}, "rows": rows,
            "ref_commit": ref_commit, "rollout": record or {},
            "outcome": rollout_outcome(record, rows, counted["states"]) if record else None,
            "footer": counted,
            "not_in_inventory": [row_for(h, reports.get(h), state.get(h), now=now,
                                         stale_after=stale_after) for h in apart],
            "not_verified": list(not_verified)}


def _write(path: str, text: str) -> None:
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".part", path)


def write_fleet(fleet: dict, out_dir: str, stamp: str) -> tuple:
    """Writes out_dir/fleet-<stamp>.json and .md; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"fleet-{stamp}")
    _write(base + ".json", json.dumps(fleet, indent=2, sort_keys=True) + "\n")
    _write(base + ".md", render_markdown(fleet))
    return base + ".json", base + ".md"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", required=True, metavar="DIR",
                        help="per-rig reports written by the role (DIR/<host>.json)")
    parser.add_argument("--pulled", metavar="DIR", help="reports uploaded by pulled rigs")
    parser.add_argument("--rig-keys", metavar="FILE",
                        help="the fleet's list of rig keys (allowed-signers format, written by "
                             "enrolments): each pulled upload must verify as the rig it was "
                             "uploaded as, else it is listed apart; without it, pulled reports "
                             "are read unverified and the report says so")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="the rollout's state, one DIR/<host>.json per rig")
    parser.add_argument("--hosts", default="", metavar="A,B,...",
                        help="every rig of the rollout, comma-separated: each gets a row, and "
                             "a report or state of any other rig is listed apart as not in "
                             "this inventory, never counted; without it (or empty) every rig "
                             "found in the folders is a row and is counted")
    parser.add_argument("--rollout", metavar="FILE",
                        help="what the rollout was (rollout_info.yml's file): its lines first")
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="SECONDS",
                        help="a pulled rig whose newest report is older is stale (default "
                             f"{STALE_AFTER_S}: two 30-minute timer runs plus the 600 s random "
                             "delay)")
    parser.add_argument("--ref-commit", metavar="COMMIT",
                        help="the commit the fleet's pull ref names now (git rev-parse "
                             "fleet-live^{commit}): every pulled rig that applied another is "
                             "named before the table")
    parser.add_argument("--out", required=True, metavar="DIR", help="where fleet-*.json/md go")
    parser.add_argument("--print", action="store_true", help="print the Markdown on stdout")
    return parser


def host_list(text) -> list:
    """Host names from 'a,b, c' (blanks and repeats dropped, order kept)."""
    names = [name.strip() for name in str(text or "").split(",")]
    return list(dict.fromkeys(name for name in names if name))


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else EXIT_OK
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        reports, notes = load_report_dir(args.reports, "reports")
        sources, not_verified = [reports], []
        if args.pulled:
            rig_keys, keys_notes = None, []
            if args.rig_keys:
                keys_path, enrolled, keys_notes = read_rig_keys(args.rig_keys)
                rig_keys = (keys_path, enrolled)
            pulled, more, not_verified = load_pulled_dir(args.pulled, rig_keys)
            sources.append(pulled)
            notes += more + (keys_notes if pulled or not_verified else [])
            if rig_keys is None and pulled:
                notes.append(f"{UNVERIFIED_LINE} (give --rig-keys FILE)")
        state = load_state_dir(args.state_dir) if args.state_dir else {}
        record = (_read_json(args.rollout, "rollout file")
                  if args.rollout and os.path.exists(args.rollout) else None)
        if record is not None and not isinstance(record, dict):
            raise BadInput(f"rollout file {args.rollout}: expected an object")
    except BadInput as exc:
        sys.stderr.write(f"fleet_report: {exc}\n")
        return EXIT_BAD_INPUT
    for note in notes:
        sys.stderr.write(f"fleet_report: {note}\n")
    hosts = host_list(args.hosts)
    if state and not hosts:
        # A rollout's report shows the rigs it rolled out to and the pulled rigs' uploads, not
        # every report ever left in the folder (rigs gone from the inventory, other inventories).
        # With a rig list, build_fleet lists the others apart instead.
        sources[0] = {host: report for host, report in sources[0].items() if host in state}
    try:
        fleet = build_fleet(merge_reports(*sources), state,
                            now.isoformat(timespec="seconds").replace("+00:00", "Z"),
                            {"reports": args.reports, "pulled": args.pulled,
                             "rig_keys": args.rig_keys, "state": args.state_dir, "hosts": hosts},
                            hosts=hosts, rollout=bool(args.state_dir), record=record,
                            now=now, stale_after=args.stale_after, not_verified=not_verified,
                            ref_commit=args.ref_commit)
        paths = write_fleet(fleet, args.out, now.strftime("%Y%m%dT%H%M%SZ"))
    except Exception as exc:  # noqa: BLE001 (unexpected: say so, exit 1)
        sys.stderr.write(f"fleet_report: error: {type(exc).__name__}: {exc}\n")
        return EXIT_UNEXPECTED
    apart = [row["host"] for row in fleet["not_in_inventory"]]
    if apart:
        sys.stderr.write(f"fleet_report: not in this inventory (--hosts), listed apart and not "
                         f"counted: {', '.join(apart)}\n")
    for forged in fleet["not_verified"]:
        sys.stderr.write(f"fleet_report: {forged['file']} listed apart, not counted: not "
                         f"verified: {forged['why']}\n")
    sys.stderr.write(f"fleet_report: wrote {paths[0]} and {paths[1]}\n")
    if args.print:
        sys.stdout.write(render_markdown(fleet))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
