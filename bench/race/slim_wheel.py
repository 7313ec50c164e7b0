"""Repack a flashinfer-python wheel into a small one for the GPU test machine.

Keeps the Python that `import flashinfer` and the decode wrapper need (and small data files such
as JSON tables), drops the CUDA/C++ sources, headers and vendored libraries that only FlashInfer's
JIT compiler reads, and adds the ahead-of-time compiled modules from AOT_DIR under
flashinfer/data/aot/, where FlashInfer loads them without compiling. RECORD is rewritten so the
result installs with `pip install --no-index --no-deps --target DIR`.

Usage: python3 slim_wheel.py WHEEL AOT_DIR OUT_DIR   (prints the path of the new wheel)
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

# Source/header suffixes only the JIT compiler reads; the AOT modules replace them.
DROP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp", ".inc", ".cubin", ".so")


def keep(name: str) -> bool:
    if name.startswith("flashinfer/data/csrc/"):
        # FlashInfer renders a module's sources even when it then loads the AOT module, so
        # the batch decode/prefill sources and the templates stay; the rest is JIT input.
        base = name.rsplit("/", 1)[1]
        return base.startswith(("batch_decode", "batch_prefill")) or base.endswith(".jinja")
    if name.startswith("flashinfer/data/"):
        # build_backend.py / build_utils.py are tiny; everything else there is JIT input.
        return name.count("/") == 2 and name.endswith(".py")
    return not name.endswith(DROP_SUFFIXES)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim(wheel: Path, aot_dir: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / wheel.name
    records = []
    record_name = None
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(
        out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9
    ) as dst:
        for info in src.infolist():
            if info.is_dir():
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            if not keep(info.filename):
                continue
            data = src.read(info)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            records.append(record_line(info.filename, data))
        for so in sorted(aot_dir.glob("*/*.so")):
            name = f"flashinfer/data/aot/{so.parent.name}/{so.name}"
            data = so.read_bytes()
            zinfo = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            zinfo.external_attr = 0o755 << 16
            dst.writestr(zinfo, data, compress_type=zipfile.ZIP_DEFLATED)
            records.append(record_line(name, data))
        if record_name is None:
            raise SystemExit(f"{wheel}: no RECORD")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(slim(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
