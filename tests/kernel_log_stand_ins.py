"""Stand-ins for the real dmesg and journalctl that the kernel-log double
(molecule/doubles/dmesg-double) wraps, for the tests that run the double: a VM's kernel log (one
boot line, in the format asked for) and a journal that keeps kernel lines (JOURNAL_KEEPS_KERNEL=1,
the default: one old line) or none. Each appends "<tool> <arguments>" to calls.log beside it."""

from pathlib import Path

DOUBLE = Path(__file__).parents[1] / "molecule/doubles/dmesg-double"

REAL_DMESG = """#!/bin/sh
echo "dmesg $*" >> "${0%/*}/calls.log"
case " $* " in
  *" --time-format=iso "*) echo "2026-12-01T10:00:00,000000+00:00 Linux version 6.1.0" ;;
  *" -T "*) echo "[Tue Dec  1 10:00:00 2026] Linux version 6.1.0" ;;
  *) echo "[    0.000000] Linux version 6.1.0" ;;
esac
"""
REAL_JOURNALCTL = """#!/bin/sh
echo "journalctl $*" >> "${0%/*}/calls.log"
[ "${JOURNAL_KEEPS_KERNEL:-1}" = 1 ] && echo "1796131000.000000 rig kernel: Linux version 6.1.0"
exit 0
"""


def install_kernel_log_tools(folder):
    """<folder>/bin with the double as dmesg and journalctl, <folder>/real with the stand-ins:
    (double_bin, real_bin), to put on PATH in that order."""
    double_bin, real_bin = Path(folder) / "bin", Path(folder) / "real"
    double_bin.mkdir()
    real_bin.mkdir()
    for name, text in (("dmesg", REAL_DMESG), ("journalctl", REAL_JOURNALCTL)):
        (double_bin / name).symlink_to(DOUBLE)
        (real_bin / name).write_text(text)
        (real_bin / name).chmod(0o755)
    return double_bin, real_bin
