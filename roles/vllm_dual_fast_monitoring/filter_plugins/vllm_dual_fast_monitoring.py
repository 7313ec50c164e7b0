"""Which rigs the monitoring host scrapes, and why it skips the others; which rigs push their
series to it, with whose token (pure functions)."""

import importlib.util
import os
import re

from ansible.errors import AnsibleFilterError

# The push receiver's certificate names what the rigs connect to as the rig role's LAN
# certificate does: the same function, from the rig role beside this one (one repository).
_TLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))),
                    "vllm_dual_fast", "filter_plugins", "vllm_dual_fast_tls.py")
_spec = importlib.util.spec_from_file_location("vllm_dual_fast_tls_for_monitoring", _TLS)
_tls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tls)
# A push token goes into nginx's configuration as a regex, escaped: these characters only.
_PUSH_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{32,}")

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def rig_facts(names, varsets, certified=()):
    """One dict per rig, what scrape_targets reads, from the rigs' inventory variables (the
    rig role's defaults where a rig sets none: port 8000, loopback bind, no token). certified:
    the rigs whose served TLS certificate the controller holds (their deploys fetched it)."""
    facts = []
    for name, found in zip(names, varsets, strict=True):
        facts.append({"rig": name, "address": found.get("ansible_host", name),
                      "port": found.get("vllm_dual_fast_port", 8000),
                      "bind": found.get("vllm_dual_fast_bind_address", "127.0.0.1"),
                      "token": found.get("vllm_dual_fast_metrics_token", ""),
                      "pull": bool(found.get("vllm_dual_fast_pull_repo_url", "")),
                      "push_token": found.get("vllm_dual_fast_push_token", "")
                      if found.get("vllm_dual_fast_push_url", "") else "",
                      "certificate": name in set(certified or ())})
    return facts


def scrape_targets(rigs):
    """(targets, skipped) from one dict per rig of the rig group: {rig, address, port, bind,
    token, pull, certificate}. A rig is scraped through its nginx at address:port, over TLS
    trusting the certificate its deploy fetched, when it publishes on the LAN (a bind address
    not loopback) with a metrics token, that certificate is on the controller, and it is not a
    pull rig (behind NAT: seen through its reports). targets: [{rig, target}]; skipped:
    [{rig, why}]."""
    targets, skipped = [], []
    for rig in rigs:
        name = rig["rig"]
        if rig.get("push_token"):
            skipped.append({"rig": name, "why": "pushes its series (vllm_dual_fast_push_url)"})
        elif rig.get("pull"):
            skipped.append({"rig": name, "why": "a pull rig: seen through the reports it uploads"})
        elif str(rig.get("bind", "127.0.0.1")) in LOOPBACK:
            skipped.append({"rig": name, "why": "serves on loopback only (no LAN proxy to scrape)"})
        elif not rig.get("token"):
            skipped.append({"rig": name, "why": "has no vllm_dual_fast_metrics_token"})
        elif not rig.get("certificate", True):
            skipped.append({"rig": name, "why": "its TLS certificate is not on the controller "
                            "(vllm_dual_fast_monitoring_tls_certs_dir/<rig>.pem): deploy it"})
        else:
            address = str(rig.get("address") or name)
            host = f"[{address}]" if ":" in address and not address.startswith("[") else address
            targets.append({"rig": name, "target": f"{host}:{int(rig.get('port', 8000))}"})
    return targets, skipped


def owner_routes(owners, rig_owners):
    """One route per owner who has rigs: [{name, rigs (sorted), webhook_url, email_to}], by name.
    owners: vllm_dual_fast_monitoring_owners ({name: {webhook_url, email_to}}); rig_owners:
    {rig: its vllm_dual_fast_owner, '' for none}. A rig naming an owner that is not there, or an
    owner with neither a webhook nor an e-mail address, is refused by name (alerts that would
    reach no one)."""
    owners = owners or {}
    unknown = sorted(f"{rig} ({owner})" for rig, owner in rig_owners.items()
                     if owner and owner not in owners)
    if unknown:
        raise AnsibleFilterError(
            "these rigs name an owner vllm_dual_fast_monitoring_owners does not have: "
            + ", ".join(unknown))
    routes = []
    for name in sorted(owners):
        reach = owners[name] or {}
        if not (reach.get("webhook_url") or reach.get("email_to")):
            raise AnsibleFilterError(
                f"vllm_dual_fast_monitoring_owners.{name} has neither webhook_url nor email_to: "
                "alerts for its rigs would reach no one")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
            raise AnsibleFilterError(f"owner name {name!r}: letters, digits, '.', '_' and '-' only")
        rigs = sorted(rig for rig, owner in rig_owners.items() if owner == name)
        if rigs:
            routes.append({"name": str(name), "rigs": rigs,
                           "webhook_url": reach.get("webhook_url", ""),
                           "email_to": reach.get("email_to", "")})
    return routes


def push_rigs(rigs):
    """[{rig, token}] of the rigs (rig_facts') that push their series to this host, by name. A
    token too short or with characters nginx's map could read as a pattern, or one token for
    two rigs (the series would carry either name), is refused by rig name, never printed."""
    found, seen = [], {}
    for rig in sorted(rigs or [], key=lambda r: r["rig"]):
        token = str(rig.get("push_token") or "")
        if not token:
            continue
        if not _PUSH_TOKEN.fullmatch(token):
            raise AnsibleFilterError(
                f"{rig['rig']}: vllm_dual_fast_push_token must be 32 or more of letters, digits "
                "and ._~+/=- (openssl rand -base64 33)")
        if token in seen:
            raise AnsibleFilterError(
                f"{rig['rig']} and {seen[token]} have the same vllm_dual_fast_push_token: each rig "
                "needs its own")
        seen[token] = rig["rig"]
        found.append({"rig": rig["rig"], "token": token})
    return found


def subject_alt_names(names):
    """openssl's subjectAltName value for the receiver's names (the rig role's function)."""
    return _tls.subject_alt_names(names)


DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_seconds(duration):
    """Seconds of a Prometheus duration ("10m", "1h30m", "3d"), for a rule that compares it with
    time() - a timestamp series. ValueError for anything else."""
    text = str(duration).strip()
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{duration!r} is not a Prometheus duration (e.g. 10m, 1h30m, 3d)")
    total = sum(int(n) * DURATION_UNITS[u] for n, u in parts)
    return int(total) if float(total).is_integer() else total


class FilterModule:
    def filters(self):
        return {"vllm_dual_fast_monitoring_rig_facts": rig_facts,
                "vllm_dual_fast_monitoring_scrape_targets": scrape_targets,
                "vllm_dual_fast_monitoring_duration_seconds": duration_seconds,
                "vllm_dual_fast_monitoring_owner_routes": owner_routes,
                "vllm_dual_fast_monitoring_push_rigs": push_rigs,
                "vllm_dual_fast_monitoring_subject_alt_names": subject_alt_names}
