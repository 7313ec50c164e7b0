"""The serving release's filters: what YAML uses of the domain library's release module
(module_utils/vllm_dual_fast_domain/release.py: the switch, the release's name and manifest)."""

import os

import ansible.module_utils

# The domain library is the role's module_utils/vllm_dual_fast_domain, which Ansible packs into
# the modules as ansible.module_utils.*; a controller plugin does not see a role's module_utils,
# so its folder (found from this file, wherever the role lies or links to) joins
# ansible.module_utils' path, as tests/conftest.py does. In each filter file, not in a helper
# beside them: Ansible loads every filter file on its own, under a name of its own, so a helper
# would itself have to be found by path (and would be loaded as a filter plugin).
_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "module_utils")
if _UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_UTILS)

from ansible.module_utils.vllm_dual_fast_domain.release import (  # noqa: E402
    image_keep_tag,
    image_reference,
    release_baseline,
    release_identity,
    release_manifest,
    release_name,
    release_switch,
    release_verdict,
)


class FilterModule:
    # Only what the role's YAML uses; tests call the domain library itself.
    def filters(self):
        return {
            "vllm_dual_fast_release_switch": release_switch,
            "vllm_dual_fast_release_baseline": release_baseline,
            "vllm_dual_fast_release_manifest": release_manifest,
            "vllm_dual_fast_release_verdict": release_verdict,
            "vllm_dual_fast_release_identity": release_identity,
            "vllm_dual_fast_release_name": release_name,
            "vllm_dual_fast_image_reference": image_reference,
            "vllm_dual_fast_image_keep_tag": image_keep_tag,
        }
