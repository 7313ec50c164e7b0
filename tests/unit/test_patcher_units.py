"""The patcher's pure functions on small sources: every call layout FlashInfer has used."""

from __future__ import annotations

import pytest
from flashinfer_releases import load_patcher

patcher = load_patcher()

LAYOUTS = {
    "one line": b"""class W:
    def __init__(self):
        self._pin_memory_int_workspace_buffer = torch.empty((8,), pin_memory=True, device="cpu")
""",
    "device after, trailing comma": b"""class W:
    def __init__(self):
        self._pin_memory_int_workspace_buffer = torch.empty(
            (8 * 1024 * 1024,),
            dtype=torch.uint8,
            pin_memory=True,
            device="cpu",
        )
""",
    "device before, no trailing comma, else branch, suffixes": b"""class W:
    def reset(self, buf, cuda_graph):
        if cuda_graph:
            self._pin_memory_int_workspace_buffer = torch.empty((0,), device="cpu")
        else:
            self._pin_memory_int_workspace_buffer_p = torch.empty(
                buf.shape, dtype=buf.dtype, device="cpu", pin_memory=True)
            self._pin_memory_int_workspace_buffer_d: torch.Tensor = torch.empty(
                buf.shape,
                device="cpu",
                pin_memory=True
            )
        self._other = torch.empty((1,), pin_memory=True)
""",
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layouts_flip_exactly_the_targets(name):
    source = LAYOUTS[name]
    pinned = source.count(b"pin_memory=True") - (b"self._other" in source)
    patched = patcher.patch_source(source, name)
    body, marker = patched.rsplit(b"\n# fi-pinq:", 1)
    assert body + b"\n" == source.replace(b"pin_memory=True", b"pin_memory=False", pinned)
    assert marker.endswith(b"--revert)\n")
    compile(patched, name, "exec")
    assert patcher.classify(patched, name)[0] == "already-patched"
    assert patcher.revert_source(patched, name) == source


def test_absent_keyword_counts_as_unpinned():
    source = LAYOUTS["device before, no trailing comma, else branch, suffixes"]
    allocations = patcher.find_allocations(source, "x")
    assert [(a.attribute, a.pinned) for a in allocations] == [
        ("_pin_memory_int_workspace_buffer", None),
        ("_pin_memory_int_workspace_buffer_p", True),
        ("_pin_memory_int_workspace_buffer_d", True),
    ]


@pytest.mark.parametrize(
    "value", [b"pin_memory=pin", b"pin_memory=not False", b"**kw", b"pin_memory=1"]
)
def test_non_literal_pin_memory_is_drift(value):
    source = LAYOUTS["device after, trailing comma"].replace(b"pin_memory=True", value)
    with pytest.raises(patcher.Drift, match="line"):
        patcher.classify(source, "decode.py")


def test_other_allocator_for_target_is_drift():
    source = LAYOUTS["one line"].replace(b"torch.empty(", b"torch.zeros(")
    with pytest.raises(patcher.Drift, match="expected torch.empty"):
        patcher.classify(source, "decode.py")


def test_no_target_at_all_is_drift():
    with pytest.raises(patcher.Drift, match="no torch.empty"):
        patcher.classify(b"x = torch.empty((1,), pin_memory=True)\n", "decode.py")


def test_second_marker_is_drift():
    patched = patcher.patch_source(LAYOUTS["one line"], "x")
    marker = patched.rsplit(b"\n", 2)[1] + b"\n"
    with pytest.raises(patcher.Drift, match="second fi-pinq marker"):
        patcher.classify(marker + patched, "x")


def test_marker_not_last_is_drift():
    patched = patcher.patch_source(LAYOUTS["one line"], "x")
    with pytest.raises(patcher.Drift, match="last line"):
        patcher.classify(patched + b"pass\n", "x")


def test_standard_library_only_and_python39_syntax():
    import ast
    import sys

    from flashinfer_releases import PATCHER

    tree = ast.parse(PATCHER.read_text(), feature_version=(3, 9))
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    top = {m.split(".")[0] for m in modules}
    assert top - {"__future__"} <= set(sys.stdlib_module_names), top
