#!/usr/bin/python
"""Read the rig's kernel log for the window kernel_window.yml opened, in one module run.

Never dmesg's wall-clock rendering (--time-format=iso, -T): it adds the kernel's stamps to a boot
time that drifts away from the wall clock after a suspend or over a long uptime. journald keeps
the kernel's lines with the rig's own wall clock at receipt, across boots: where it keeps this
boot's kernel lines they are read from it since the window's wall-clock second; where it keeps
none (journald not reading the kernel log, no journald), dmesg's own boot-relative stamps are
read with the boot's id, to be compared with the kernel clock the window noted. Which lines
count is the filter's (vllm_dual_fast_kernel_log, module_utils/vllm_dual_fast_domain/verdict.py)."""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_dual_fast_command import run_command

DOCUMENTATION = r"""
module: vllm_dual_fast_kernel_log
short_description: Read the kernel log since a window opened (journald, else dmesg)
options:
  since_epoch:
    description: The window's wall-clock second (kernel_window.yml's since_epoch).
    type: float
    required: true
"""

RETURN = r"""
read:
  description: >-
    {source (journal or dmesg), rc, stdout_lines, stderr (what the reader said), boot_id (the
    boot the dmesg lines are of; '' for the journal)}.
  type: dict
"""

JOURNAL = ["journalctl", "_TRANSPORT=kernel", "--quiet", "--no-pager", "--output=short-unix"]
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def run(argv):
    """(rc, stdout lines, stderr) of argv; a reader that is not there is rc 127."""
    done = run_command(argv, 120)
    return done["rc"], done["stdout_lines"], done["stderr"].strip()


def journal_keeps_kernel_lines(runner=run):
    """Whether journald holds any kernel line of this boot."""
    rc, lines, _ = runner(JOURNAL[:2] + ["--boot=0", "--lines=1"] + JOURNAL[2:])
    return rc == 0 and any(line.strip() for line in lines)


def read_kernel_log(since_epoch, runner=run, boot_id_path=BOOT_ID):
    if journal_keeps_kernel_lines(runner):
        rc, lines, said = runner(JOURNAL[:2] + [f"--since=@{since_epoch}"] + JOURNAL[2:])
        return {"source": "journal", "rc": rc, "stdout_lines": lines, "stderr": said,
                "boot_id": ""}
    rc, lines, said = runner(["dmesg"])
    try:
        with open(boot_id_path, encoding="ascii") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = ""
    return {"source": "dmesg", "rc": rc, "stdout_lines": lines, "stderr": said,
            "boot_id": boot_id}


def main():
    module = AnsibleModule(argument_spec={"since_epoch": {"type": "float", "required": True}},
                           supports_check_mode=True)    # it only reads
    module.exit_json(changed=False, read=read_kernel_log(module.params["since_epoch"]))


if __name__ == "__main__":
    main()
