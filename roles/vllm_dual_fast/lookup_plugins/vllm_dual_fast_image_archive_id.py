"""The identity of a `docker save` tarball on the controller: sha256 of its manifest.json.

The manifest names the image's config and every layer by digest (the OCI layout Docker 25 and
later writes, and the older one alike), so two archives of one image share it and any change to
the image changes it. model.yml compares it with the one recorded on the rig when Docker loaded
an archive there, instead of the copy module hashing the whole archive on both ends every run
(3.5 GB for the CPU build: 5 s of an unchanged run)."""

import hashlib
import tarfile

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: vllm_dual_fast_image_archive_id
short_description: sha256 of a docker save tarball's manifest.json
options:
  _terms:
    description: Paths of `docker save` tarballs on the controller.
    required: true
"""

RETURN = r"""
_raw:
  description: "'sha256:<hex>' for each tarball."
  type: list
  elements: str
"""


def archive_id(path):
    """'sha256:<hex>' of the tarball's manifest.json; AnsibleError when it is not a tarball
    `docker save` wrote (no manifest.json at its top)."""
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if member.name == "manifest.json" and member.isfile():
                    return "sha256:" + hashlib.sha256(tar.extractfile(member).read()).hexdigest()
    except (OSError, tarfile.TarError) as err:
        raise AnsibleError(f"vllm_dual_fast_image_archive {path} cannot be read as a tarball: "
                           f"{err}") from err
    raise AnsibleError(f"vllm_dual_fast_image_archive {path} has no manifest.json: it is not a "
                       "tarball `docker save` wrote (scripts/save-image-archive.sh writes one)")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [archive_id(str(term)) for term in terms]
