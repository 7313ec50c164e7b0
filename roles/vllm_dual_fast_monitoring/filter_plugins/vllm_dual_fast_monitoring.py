"""Which rigs the monitoring host scrapes, and why it skips the others (pure functions)."""

import re

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
        if rig.get("pull"):
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
                "vllm_dual_fast_monitoring_duration_seconds": duration_seconds}
