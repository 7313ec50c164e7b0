#!/usr/bin/env bash
# Saves a local image to a tarball the role loads on an offline rig (vllm_dual_fast_image_archive).
# Re-saved only when the image changed (its id is kept beside the tarball).
set -euo pipefail
image="$1" out="$2"
id="$(docker image inspect -f '{{.Id}}' "${image}")"
if [ -s "${out}" ] && [ "$(cat "${out}.id" 2>/dev/null)" = "${id}" ]; then
  echo "save-image-archive: ${out} is current"; exit 0
fi
mkdir -p "$(dirname "${out}")"
docker save -o "${out}.part" "${image}"
mv "${out}.part" "${out}"
echo "${id}" >"${out}.id"
echo "save-image-archive: saved ${image} to ${out}"
