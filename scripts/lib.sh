# Shared helpers for the project's shell scripts (sourced, not run).

# The Debian archive mirror this machine's own APT configuration uses.
mirror_uri() {
  local uri
  uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [ -n "${uri}" ] || { echo "no Debian mirror in /etc/apt/sources.list.d/debian.sources" >&2; return 1; }
  echo "${uri}"
}

# The security mirror this machine uses (the second URIs of its deb822 sources).
security_mirror_uri() {
  local uri
  uri="$(awk '/^URIs:/ {n++; if (n == 2) {print $2; exit}}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  echo "${uri:-$(mirror_uri)-security}"
}
