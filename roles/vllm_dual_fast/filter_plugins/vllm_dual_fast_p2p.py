"""The P2P check's filters: what YAML uses of the domain library's p2p module
(module_utils/vllm_dual_fast_domain/p2p.py: the check's key, record and report)."""

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

from ansible.module_utils.vllm_dual_fast_domain.p2p import (  # noqa: E402
    p2p_check_due,
    p2p_check_key,
    p2p_check_record,
    p2p_decision,
    p2p_stored,
)


class FilterModule:
    # Only what the role's YAML uses; tests call the domain library itself.
    def filters(self):
        return {
            "vllm_dual_fast_p2p_check_key": p2p_check_key,
            "vllm_dual_fast_p2p_check_due": p2p_check_due,
            "vllm_dual_fast_p2p_check_record": p2p_check_record,
            "vllm_dual_fast_p2p_decision": p2p_decision,
            "vllm_dual_fast_p2p_stored": p2p_stored,
        }
