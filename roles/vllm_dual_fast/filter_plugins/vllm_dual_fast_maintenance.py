"""The maintenance run's filters: what YAML uses of the domain library's maintenance module
(module_utils/vllm_dual_fast_domain/maintenance.py: APT's plan, GRUB's kernel, the result)."""

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

from ansible.module_utils.vllm_dual_fast_domain.maintenance import (  # noqa: E402
    apt_simulation,
    apt_unmet,
    apt_versions_missing,
    branch_end_of_life,
    branch_move,
    fallback_packages,
    grub_entry,
    kernel_without_module,
    maintenance_install_args,
    maintenance_result,
    maintenance_verdict,
    module_file_for,
    module_not_published,
    newest_kernel,
    plan_versions,
)


class FilterModule:
    # Only what the role's YAML uses; tests call the domain library itself.
    def filters(self):
        return {
            "vllm_dual_fast_apt_simulation": apt_simulation,
            "vllm_dual_fast_apt_unmet": apt_unmet,
            "vllm_dual_fast_apt_versions_missing": apt_versions_missing,
            "vllm_dual_fast_plan_versions": plan_versions,
            "vllm_dual_fast_maintenance_install_args": maintenance_install_args,
            "vllm_dual_fast_newest_kernel": newest_kernel,
            "vllm_dual_fast_kernel_without_module": kernel_without_module,
            "vllm_dual_fast_branch_move": branch_move,
            "vllm_dual_fast_branch_end_of_life": branch_end_of_life,
            "vllm_dual_fast_module_not_published": module_not_published,
            "vllm_dual_fast_grub_entry": grub_entry,
            "vllm_dual_fast_fallback_packages": fallback_packages,
            "vllm_dual_fast_module_file_for": module_file_for,
            "vllm_dual_fast_maintenance_result": maintenance_result,
            "vllm_dual_fast_maintenance_verdict": maintenance_verdict,
        }
