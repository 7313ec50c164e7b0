"""The fit's filters: what YAML uses of the domain library's envelope module (envelope.py: what a
start said of its pool) and fit module (fit.py: a candidate's verdict, the envelope kept, the
rig's host_vars file and the fit report)."""

import os

import ansible.module_utils

# As in every filter file (vllm_dual_fast_p2p.py says why): the role's module_utils joins
# ansible.module_utils' path before the domain library is imported.
_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "module_utils")
if _UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_UTILS)

from ansible.module_utils.vllm_dual_fast_domain.envelope import engine_start_facts  # noqa: E402
from ansible.module_utils.vllm_dual_fast_domain.fit import (  # noqa: E402
    fit_candidate_verdict,
    fit_candidates,
    fit_envelope,
    fit_report,
    host_vars_text,
)


class FilterModule:
    # Only what the role's YAML and playbooks/fit.yml use; tests call the domain library itself.
    def filters(self):
        return {
            "vllm_dual_fast_engine_start_facts": engine_start_facts,
            "vllm_dual_fast_fit_verdict": fit_candidate_verdict,
            "vllm_dual_fast_fit_envelope": fit_envelope,
            "vllm_dual_fast_fit_report": fit_report,
            "vllm_dual_fast_fit_candidates": fit_candidates,
            "vllm_dual_fast_fit_host_vars": host_vars_text,
        }
