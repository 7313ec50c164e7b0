#!/usr/bin/env bash
# One-off measurement: files/vllm_flags_check.py against the REAL `vllm serve` parsers of vLLM
# 0.27.1 and 0.33.0 (pip installs on this CPU machine) and against the project's vLLM double.
# Writes bench/results/vllm-parsers.json and bench/results/vllm-parsers.md.
#
#   bench/vllm_parsers/run.sh
#
# Settings (environment):
#   VDF_CACHE     cache root (default ~/.cache/vllm-dual-fast); the venvs live in
#                 $VDF_CACHE/vllm-venvs/<version> and are reused when they exist
#   VERSIONS      vLLM releases to measure (default "0.27.1 0.33.0")
#   BASE_PYTHON   interpreter for the venvs (default python3.11: the CPU torch wheel on local
#                 disk is cp311)
#   CPU_TORCH     torch version pinned beside vLLM when vLLM's own pin allows it (default 2.13.0,
#                 a CPU build on local disk); otherwise pip chooses (a CUDA build from the index)
#   HOST_PYTHON   Python that renders the role's argv (default .venv/bin/python: PyYAML, Jinja2,
#                 ansible-core)
#   RESULTS       where the results go (default bench/results)
#   DOUBLE_ONLY   1: skip the real releases (a quick run of the double's side alone)
# Not for CI: each install is several GB and minutes of a CPU.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/vllm_parsers"
CACHE="${VDF_CACHE:-$HOME/.cache/vllm-dual-fast}"
VERSIONS="${VERSIONS:-0.27.1 0.33.0}"
BASE_PYTHON="${BASE_PYTHON:-python3.11}"
CPU_TORCH="${CPU_TORCH:-2.13.0}"
HOST_PYTHON="${HOST_PYTHON:-$ROOT/.venv/bin/python}"
RESULTS="${RESULTS:-$ROOT/bench/results}"
DOUBLE_ONLY="${DOUBLE_ONLY:-0}"
DOUBLE_SRC="$ROOT/molecule/images/vllm-double/src"
# Intermediate files (per-target JSON, the case argvs, the command log) stay here for a look.
WORK="$CACHE/vllm-parsers-work"

rm -rf "$WORK"
mkdir -p "$WORK" "$CACHE/vllm-venvs" "$RESULTS"
COMMANDS="$WORK/commands.txt"
: >"$COMMANDS"
printf '# bench/vllm_parsers/run.sh (VERSIONS="%s" BASE_PYTHON=%s CPU_TORCH=%s) ran:\n' \
  "$VERSIONS" "$BASE_PYTHON" "$CPU_TORCH" >>"$COMMANDS"

# Runs a command after writing it, with $HOME and the repository shortened, to the command log.
logged() {
  local line
  line="$(printf '%q ' "$@")"
  line="${line% }"
  line="${line//"$ROOT"/.}"
  line="${line//"$HOME"/\~}"
  printf '%s\n' "$line" >>"$COMMANDS"
  "$@"
}

note() { printf '# %s\n' "$*" >>"$COMMANDS"; echo "== $*"; }

# On this CPU machine torch's companions that pip installs for vLLM may not load beside the
# torch it got (built for another torch, or needing CUDA libraries that a CPU torch does not
# bring). vLLM imports them while importing its parser modules (transformers imports
# torchvision/torchaudio when present; vllm.multimodal.video imports torchcodec and catches
# ImportError and RuntimeError, not the OSError of a library that does not load). Each one that
# fails to import is uninstalled: absent, vLLM uses a placeholder. Noted in .vdf-removed.txt
# (name<TAB>why), run every time so that a reused venv gets the same treatment.
make_parser_loadable() {
  local venv="$1" module why
  for module in torchvision torchaudio torchcodec; do
    "$venv/bin/python" -m pip show -q "$module" >/dev/null 2>&1 || continue
    if ! why="$("$venv/bin/python" -c "import $module" 2>&1)"; then
      why="$(printf '%s\n' "$why" | grep -v '^ ' | tail -1 | cut -c1-200)"
      why="${why//"$venv"/<venv>}"
      note "$module does not import beside this torch ($why): uninstalling it"
      logged "$venv/bin/python" -m pip uninstall -y -q "$module"
      printf '%s\t%s\n' "$module" "$why" >>"$venv/.vdf-removed.txt"
    fi
  done
}

# Creates $CACHE/vllm-venvs/$1 with vllm==$1 unless a finished one is there (it has its install
# record .vdf-install.json), then makes its parser loadable. torch: pinned to $CPU_TORCH in the
# same pip command as vLLM, which keeps pip on the CPU wheel from local disk instead of a
# multi-GB CUDA build from the index; when vLLM pins another torch that resolve fails at once
# (ResolutionImpossible, nothing installed) and vLLM is installed alone, pip choosing the torch.
# The commands are kept in the venv (.vdf-install-commands.txt) for the report of a later run.
install_vllm() {
  local version="$1"
  local venv="$CACHE/vllm-venvs/$version"
  local record="$venv/.vdf-install.json"
  if [[ -x "$venv/bin/python" && -f "$record" ]]; then
    note "vllm $version: reusing $venv (installed $(sed -n 's/.*"recorded_at": "\(.*\)".*/\1/p' \
      "$record")), made by:"
    sed 's/^/#   /' "$venv/.vdf-install-commands.txt" >>"$COMMANDS" 2>/dev/null || true
    make_parser_loadable "$venv"
    return
  fi
  rm -rf "$venv"  # a venv without its record is a half-finished install: start over
  local first_line=$(($(wc -l <"$COMMANDS") + 1))
  note "vllm $version: installing into $venv"
  logged "$BASE_PYTHON" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip)
  local log="$venv/.vdf-install.log"
  local start torch_request
  start="$(date +%s)"
  if logged "${pip[@]}" install --report "$venv/.vdf-pip-report.json" \
      "vllm==$version" "torch==$CPU_TORCH" >"$log" 2>&1; then
    torch_request="torch==$CPU_TORCH pinned beside vllm (CPU build, local disk)"
  elif grep -q ResolutionImpossible "$log"; then
    note "vllm $version does not allow torch $CPU_TORCH: pip chooses the torch"
    if ! logged "${pip[@]}" install --report "$venv/.vdf-pip-report.json" \
        "vllm==$version" >>"$log" 2>&1; then
      tail -20 "$log" >&2
      exit 1
    fi
    torch_request="chosen by pip (vllm $version pins another torch than $CPU_TORCH)"
  else
    tail -20 "$log" >&2
    exit 1
  fi
  local seconds=$(($(date +%s) - start))
  # pip's settings on this machine (find-links, extra indexes, constraints) shape what it picks
  "${pip[@]}" --version >"$venv/.vdf-pip-config.txt"
  "${pip[@]}" config list >>"$venv/.vdf-pip-config.txt" 2>&1 || true
  "$HOST_PYTHON" "$HERE/cases.py" record-install --venv "$venv" --version "$version" \
    --seconds "$seconds" --torch-request "$torch_request" \
    --pip-report "$venv/.vdf-pip-report.json" --pip-config "$venv/.vdf-pip-config.txt" \
    --out "$record"
  make_parser_loadable "$venv"
  tail -n +"$first_line" "$COMMANDS" >"$venv/.vdf-install-commands.txt"
  echo "   installed in ${seconds} s: $(du -sh "$venv" | cut -f1)"
}

# The role's reference argv, then the case argvs built from it.
note "role reference argv, and the cases built from it"
logged "$HOST_PYTHON" "$HERE/reference_argv.py" >"$WORK/reference.json"
logged "$HOST_PYTHON" "$HERE/cases.py" cases --reference "$WORK/reference.json" \
  --out "$WORK/cases.json"
note "each case: env minus VLLM_*/NVIDIA_*/CUDA_*/HF_*/VDF_*, then" \
  "PYTHON files/vllm_flags_check.py '<argv as JSON list>' (argvs in vllm-parsers.json)"

# Real releases, one at a time (one pip at a time on a shared machine).
for version in $VERSIONS; do
  [[ "$DOUBLE_ONLY" == 1 ]] && break
  install_vllm "$version"
  note "vllm $version: the cases with the venv's python"
  logged "$HOST_PYTHON" "$HERE/cases.py" run --label "$version" \
    --python "$CACHE/vllm-venvs/$version/bin/python" \
    --install "$CACHE/vllm-venvs/$version/.vdf-install.json" \
    --cases "$WORK/cases.json" --out "$WORK/target-$version.json"
done

# The double: the same cases, its package on PYTHONPATH. It runs from a copy of its source (no
# bytecode or layout change lands in the image's build context). Where the double has layout.py
# (its tree as committed is laid out as 0.27.1; the 0.33.0 image runs `layout.py 0.33.0`), each
# release in $VERSIONS gets its own copy laid out as that release; otherwise one copy as it is.
DOUBLE_DIR="$ROOT/molecule/images/vllm-double"
DOUBLE_STATE="$(cd "$ROOT" && git status --porcelain -- molecule/images/vllm-double | wc -l)"
DOUBLE_HASH="$(cd "$DOUBLE_SRC" && find . -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort \
  | xargs sha256sum | sha256sum | cut -c1-16)"
double_layouts=(as-is)
if [[ -f "$DOUBLE_DIR/layout.py" ]]; then
  read -r -a double_layouts <<<"$VERSIONS"
fi
for layout in "${double_layouts[@]}"; do
  copy="$WORK/double-$layout/src"
  mkdir -p "$copy"
  cp -r "$DOUBLE_SRC/vllm" "$copy/"
  if [[ "$layout" != as-is ]]; then
    note "the vLLM double laid out as $layout (a copy of its source; layout.py)"
    logged "$BASE_PYTHON" "$DOUBLE_DIR/layout.py" "$layout" "$copy/vllm"
  else
    note "the vLLM double as it is (a copy of its source)"
  fi
  logged "$HOST_PYTHON" "$HERE/cases.py" run --label "double-$layout" --python "$BASE_PYTHON" \
    --pythonpath "$copy" --cases "$WORK/cases.json" --out "$WORK/target-double-$layout.json" \
    --about "layout=$layout" "source sha256 (its .py files, 16 hex)=$DOUBLE_HASH" \
    "uncommitted paths under molecule/images/vllm-double=$DOUBLE_STATE"
done

note "merge into the results"
logged "$HOST_PYTHON" "$HERE/cases.py" report --work "$WORK" \
  --json "$RESULTS/vllm-parsers.json" --md "$RESULTS/vllm-parsers.md"
echo "results: $RESULTS/vllm-parsers.json $RESULTS/vllm-parsers.md"
