"""The LAN bind's certificate (tasks/tls.yml): the names it is made for and its fingerprint
(pure; tested in tests/integration/test_lan_tls.py)."""

import ipaddress
import re

# What a DNS subjectAltName may hold here: a host name, never a separator of openssl's list.
_DNS_NAME = re.compile(r"^[A-Za-z0-9*]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_WILDCARD_BINDS = ("0.0.0.0", "::")  # noqa: S104 (a bind address, named to be dropped)
_FINGERPRINT = re.compile(r"Fingerprint=((?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2})\s*$", re.M)


def subject_alt_names(names) -> str:
    """openssl's subjectAltName value for `names`: IP:<address> for addresses (IPv6 without
    brackets), DNS:<name> for host names, each once in the order given; empty names, wildcard
    binds (0.0.0.0, ::) and anything that is neither are left out."""
    entries = []
    for name in names or []:
        text = str(name or "").strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        if not text or text in _WILDCARD_BINDS:
            continue
        try:
            entry = "IP:" + str(ipaddress.ip_address(text))
        except ValueError:
            if not _DNS_NAME.match(text):
                continue
            entry = "DNS:" + text.lower()
        if entry not in entries:
            entries.append(entry)
    return ",".join(entries)


def sha256_fingerprint(openssl_output) -> str:
    """'AB:CD:...' (32 bytes, upper case) from `openssl x509 -noout -fingerprint -sha256`,
    which OpenSSL 3 prints as 'sha256 Fingerprint=ab:cd:...' and 1.1 as 'SHA256 Fingerprint=
    AB:CD:...'; '' when there is none."""
    found = _FINGERPRINT.search(str(openssl_output or ""))
    return found.group(1).upper() if found else ""


class FilterModule:
    def filters(self):
        return {"vllm_dual_fast_subject_alt_names": subject_alt_names,
                "vllm_dual_fast_sha256_fingerprint": sha256_fingerprint}
