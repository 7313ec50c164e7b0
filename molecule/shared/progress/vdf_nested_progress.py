"""TEST PROGRESS (not a production plugin): a line per task of a playbook that a scenario's
verify runs inside its own run (the nested site, deploy and rollout runs), printed as it starts
on the verify's own output, so a person watching `make test` sees those runs move instead of
110-170 s of silence. The outermost ansible-playbook (Molecule's verify) prints nothing itself:
it records where its output goes in VDF_PROGRESS_OUT, which every playbook started below it
inherits and appends its lines to ("    nested| deploy.yml: TASK Bring the release up ...").

Enabled with ANSIBLE_CALLBACK_PLUGINS=<this folder> ANSIBLE_CALLBACKS_ENABLED=vdf_nested_progress
(the scenarios' provisioner env)."""

import os
import time

from ansible.plugins.callback import CallbackBase

OUT = "VDF_PROGRESS_OUT"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vdf_nested_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._out = os.environ.get(OUT, "")
        self._playbook = "playbook"
        self._started = time.monotonic()
        if not self._out:
            # The outermost run: what it starts inherits where to write (its own stdout).
            os.environ[OUT] = f"/proc/{os.getpid()}/fd/1"

    def _say(self, text):
        if not self._out:
            return
        try:
            took = time.monotonic() - self._started
            with open(self._out, "a", encoding="utf-8") as out:
                out.write(f"    nested| {self._playbook} {took:5.0f}s: {text}\n")
        except OSError:
            self._out = ""   # the outer run has gone: stay quiet

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "playbook")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._say(f"TASK {task.get_name()}")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            msg = str(result._result.get("msg", ""))[:200].replace("\n", " ")
            self._say(f"failed on {result._host.get_name()}: {msg}")

    def v2_playbook_on_stats(self, stats):
        for host in sorted(stats.processed):
            s = stats.summarize(host)
            self._say(f"{host}: ok={s['ok']} changed={s['changed']} failed={s['failures']} "
                      f"unreachable={s['unreachable']}")
