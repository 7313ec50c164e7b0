"""FAULT INJECTOR for the Molecule scenarios (not a production plugin): when the task named in
VDF_FAULT_AT is about to start for the VDF_FAULT_NTH time (default 1; VDF_FAULT_EVERY=1: every
time), it runs VDF_FAULT_EXEC (a shell command on the controller, e.g. one that writes a kernel
line on the rig) and then, unless VDF_FAULT_KILL=0, kills the controller's ansible-playbook with
SIGKILL to its whole process group. Every task before it has finished on every host, none of it
has started: the state a Ctrl-C, a dropped SSH session or a killed pull run leaves between two
tasks.

VDF_FAULT_POWERCUT=<container>: restart that container (the simulated rig) at once, as a power
cut would, before the kill. VDF_FAULT_MARK=<file>: "<task>@<n>" is appended there each time the
fault fires, so a test can tell a fault that never fired from one that did.

Enabled with ANSIBLE_CALLBACK_PLUGINS=<this folder> ANSIBLE_CALLBACKS_ENABLED=vdf_fault_at_task;
run the playbook in its own session (setsid) so that the kill reaches it and nothing else."""

import os
import signal
import subprocess

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vdf_fault_at_task"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        env = os.environ
        self._target = env.get("VDF_FAULT_AT", "")
        self._nth = int(env.get("VDF_FAULT_NTH", "1"))
        self._every = env.get("VDF_FAULT_EVERY") == "1"
        self._kill = env.get("VDF_FAULT_KILL", "1") != "0"
        self._seen = 0

    def v2_playbook_on_task_start(self, task, is_conditional):
        if not self._target or task.get_name().split(" : ", 1)[-1] != self._target:
            return
        self._seen += 1
        if not (self._every or self._seen == self._nth):
            return
        mark = os.environ.get("VDF_FAULT_MARK")
        if mark:
            with open(mark, "a", encoding="utf-8") as out:
                out.write(f"{self._target}@{self._seen}\n")
        command = os.environ.get("VDF_FAULT_EXEC")
        if command:
            subprocess.run(["/bin/sh", "-c", command], check=False, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rig = os.environ.get("VDF_FAULT_POWERCUT")
        if rig:
            subprocess.run(["docker", "restart", "--time", "0", rig], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self._kill:
            os.killpg(os.getpgrp(), signal.SIGKILL)
