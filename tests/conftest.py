"""The role's module_utils importable as Ansible places them (ansible.module_utils.<name>), so
tests can load the role's modules (library/) as plain Python."""

import ansible.module_utils
from ansible_runner import ROLE

if str(ROLE / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROLE / "module_utils"))
