"""Running a command on the rig as the role's modules do: one place for what a result looks like
(the shape the `command` module registers, so the tasks and filters that read a module's
readings read them as they read a command task's) and what a command that cannot start or
hangs returns."""

import subprocess


def command_result(rc, stdout, stderr, argv):
    """A registered `command` result; like Ansible's command module, without the output's
    trailing newline."""
    stdout, stderr = stdout.rstrip("\r\n"), stderr.rstrip("\r\n")
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "stdout_lines": stdout.splitlines(),
            "stderr_lines": stderr.splitlines(), "cmd": list(argv)}


def run_command(argv, timeout, merge_stderr=False):
    """argv's registered result; a command that cannot start is rc 127, one that runs past
    `timeout` seconds is stopped and rc 124 (as coreutils' timeout says)."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, timeout=timeout, check=False,
                              stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    except OSError as err:
        return command_result(127, "", str(err), argv)
    except subprocess.TimeoutExpired:
        return command_result(124, "", f"timed out after {timeout:g} s", argv)
    decode = lambda data: (data or b"").decode("utf-8", "replace")    # noqa: E731
    return command_result(done.returncode, decode(done.stdout), decode(done.stderr), argv)
