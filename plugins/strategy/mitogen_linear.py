"""Mitogen's linear strategy under the name its documents use, found through the virtualenv's
import path (requirements-dev.txt pins mitogen) rather than a path into site-packages that
changes with the Python version. ansible.cfg's strategy_plugins names this folder; a run opts
in with ANSIBLE_STRATEGY=mitogen_linear (docs/operations.md, "Faster runs with Mitogen")."""

from ansible.errors import AnsibleError

try:
    import ansible_mitogen.loaders
    import ansible_mitogen.strategy
except ImportError as error:
    raise AnsibleError(
        "ANSIBLE_STRATEGY=mitogen_linear needs the mitogen package: run `make venv` (it is pinned "
        "in requirements-dev.txt), or unset ANSIBLE_STRATEGY to run on stock Ansible."
    ) from error

# Mitogen's mixin over the linear strategy Ansible itself loads (what mitogen's own proxy does).
_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
    pass
