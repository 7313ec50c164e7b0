#!/usr/bin/env bash
# Measures the fleet rollout (playbooks/rollout.yml: all-at-once staging, then canary and
# batches) against a plain `serial: 1` rollout that downloads inside each batch, on the Molecule
# `fleet` scenario's simulated rigs, with the vLLM double's weights download made to take a fixed
# time. Prints wall times and ratios; writes bench/results/rollout.json.
#   [BENCH_GATES=0] bench/rollout/run.sh [DOWNLOAD_S]     (default 30; needs `make setup` first; ~15 minutes)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "${ROOT}"
export PATH="${ROOT}/.venv/bin:${PATH}" ANSIBLE_ROLES_PATH="${ROOT}/roles" ANSIBLE_CONFIG="${ROOT}/ansible.cfg"
export ANSIBLE_HOST_PATTERN_MISMATCH=ignore NO_COLOR=1
DOWNLOAD_S="${1:-30}"
RIGS=(vdf-fleet-1 vdf-fleet-2 vdf-fleet-3)
OUT="${ROOT}/bench/results/rollout.json"
LOG="$(mktemp -d)"

echo "bench/rollout: starting the fleet scenario's rigs (create, prepare, converge)"
molecule destroy -s fleet >/dev/null 2>&1 || true
trap 'molecule destroy -s fleet >/dev/null 2>&1 || true' EXIT
molecule create -s fleet >"${LOG}/create.log" 2>&1
molecule prepare -s fleet >"${LOG}/prepare.log" 2>&1
molecule converge -s fleet >"${LOG}/converge.log" 2>&1
# The scenario's rigs and group_vars as an inventory of the bench's own.
INVENTORY="${LOG}/inventory.yml"
python3 - "${INVENTORY}" <<'PY'
import json, sys
import yaml
scenario = yaml.safe_load(open("molecule/fleet/molecule.yml"))
hosts = {p["name"]: {"ansible_connection": "vdf_docker_api", "ansible_docker_timeout": 60} for p in scenario["platforms"]}
group_vars = scenario["provisioner"]["inventory"]["group_vars"]["rig3090"]
json.dump({"all": {"children": {"rig3090": {"hosts": hosts, "vars": group_vars}}}}, open(sys.argv[1], "w"))
PY

knob() {  # seconds: the double's weights download takes this long on every rig
  for rig in "${RIGS[@]}"; do
    docker exec "${rig}" sh -c "printf '{\"weights_mb\": 16, \"download_s\": $1}' > /opt/vllm-dual-fast/hf-cache/vllm-double.json"
  done
}

timed() {  # label limit playbook extra-json: prints the wall seconds
  local start end
  start=$(date +%s.%N)
  ansible-playbook -i "${INVENTORY}" -l "$2" "$3" -e "$4" >"${LOG}/$1.log" 2>&1 \
    || { echo "bench/rollout: $1 failed, see ${LOG}/$1.log" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "${end} - ${start}" | bc
}

knob "${DOWNLOAD_S}"
declare -A fleet serial
for n in 1 2 3; do
  limit="$(IFS=,; echo "${RIGS[*]:0:${n}}")"
  # A new model revision each time: every rig must download weights again.
  # rollout.yml's controller host takes part in its plays: a limit must name it too.
  fleet[$n]=$(timed "fleet-${n}" "${limit},vdf-rollout-controller" playbooks/rollout.yml \
    "{\"vllm_dual_fast_model_revision\": \"bench-f${n}\", \"vllm_dual_fast_gate_soak_s\": 0, \"vllm_dual_fast_gate_race_check\": \"off\"}")
  serial[$n]=$(timed "serial-${n}" "${limit}" bench/rollout/serial.yml \
    "{\"vllm_dual_fast_model_revision\": \"bench-s${n}\"}")
  printf 'bench/rollout: %d rig(s): fleet %6.1f s, serial %6.1f s, serial/fleet %.2f\n' \
    "${n}" "${fleet[$n]}" "${serial[$n]}" "$(echo "${serial[$n]} / ${fleet[$n]}" | bc -l)"
done

# The canary gates' added time: the same image change with the gates off, then on (60 s soak).
# BENCH_GATES=0 skips it (the figures are then null in the JSON).
off=null on=null
if [ "${BENCH_GATES:-1}" = 1 ]; then
  knob 0
  limit="$(IFS=,; echo "${RIGS[*]}")"
  off=$(timed gates-off "${limit},vdf-rollout-controller" playbooks/rollout.yml \
    '{"vllm_dual_fast_image": "vdf-vllm-double:0.33.0", "vllm_dual_fast_gate_soak_s": 0, "vllm_dual_fast_gate_race_check": "off"}')
  on=$(timed gates-on "${limit},vdf-rollout-controller" playbooks/rollout.yml \
    '{"vllm_dual_fast_image": "vdf-vllm-double:latest", "vllm_dual_fast_gate_soak_s": 60, "vllm_dual_fast_gate_race_check": "auto"}')
  printf 'bench/rollout: canary gates (60 s soak, race check, speed): off %.1f s, on %.1f s, added %.1f s\n' \
    "${off}" "${on}" "$(echo "${on} - ${off}" | bc -l)"
fi

python3 - "${OUT}" "${DOWNLOAD_S}" "${fleet[1]}" "${fleet[2]}" "${fleet[3]}" \
  "${serial[1]}" "${serial[2]}" "${serial[3]}" "${off}" "${on}" <<'PY'
import json, sys
out, d, f1, f2, f3, s1, s2, s3, off, on = sys.argv[1:]
fleet = [float(f1), float(f2), float(f3)]
serial = [float(s1), float(s2), float(s3)]
result = {
    "download_s": float(d),
    "rigs": [1, 2, 3],
    "fleet_s": fleet,
    "serial_s": serial,
    "serial_over_fleet": [round(s / f, 2) for s, f in zip(serial, fleet)],
    "fleet_growth_vs_1_rig": [round(f / fleet[0], 2) for f in fleet],
    "serial_growth_vs_1_rig": [round(s / serial[0], 2) for s in serial],
    "gates_off_s": None if off == "null" else float(off),
    "gates_on_s": None if on == "null" else float(on),
    "gates_added_s": None if "null" in (off, on) else round(float(on) - float(off), 1),
}
with open(out, "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")
print(json.dumps(result))
PY
