"""The role's domain in one library, pure functions of plain data that the filters (controller),
the modules (packed into each module run on the rig by AnsiballZ or Mitogen, as
ansible.module_utils.vllm_dual_fast_domain) and the tests share: `release` (which release a run
deploys and serves, `last-good`, what a failure falls back to, a release's name, identity and
manifest), `verdict` (the health check's report, its verdict and the run's outcome, each from its
one builder: files/schemas/health-report.schema.json and outcome.schema.json), `maintenance`
(what APT would do, which kernel GRUB boots, the maintenance run's result:
maintenance.schema.json) and `pull` (whether a rig's Python can install pull mode's pinned
Ansible). filter_plugins/ exports what the role's YAML uses of them. Nothing here imports from
outside the standard library, and this file imports nothing: a module carries only the parts it
imports."""
