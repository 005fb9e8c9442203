"""firmware_spec against DMP's header facts (``tests/data/dmp_abi_facts.json``, issue 26
items 1 and 9): every kernel struct of ``commands.yaml`` has the size and field offsets of
the struct DMP's headers declare, every ioctl number of ``kernel.yaml`` is the one the
headers define, and, where a C compiler is present, the facts written as C structs give
the same ``offsetof`` / ``sizeof`` as the spec."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dvsdk.hw.spec import SPEC

from .abi_facts import IOCTLS, STRUCTS, c_declarations

#: firmware_spec struct -> the C struct of the facts
SPEC_TO_C = {
    "kbuf": "dmp_dv_kbuf", "kcmdraw_header": "dmp_dv_kcmdraw", "kcmd": "dmp_dv_kcmd",
    "kwait": "dmp_dv_kwait", "kwait_v0": "wait_argument_before_96130ca",
    "kcmd_id": "run_argument", "kconv_run": "dmp_dv_kcmdraw_conv_v0_run",
    "kconv_v0": "dmp_dv_kcmdraw_conv_v0", "kconv_v1": "dmp_dv_kcmdraw_conv_v1",
    "kipu_v0": "dmp_dv_kcmdraw_ipu_v0", "kmaximizer_v0": "dmp_dv_kcmdraw_maximizer_v0",
    "ion_allocation_data": "ion_allocation_data", "ion_heap_query": "ion_heap_query",
    "ion_heap_data": "ion_heap_data", "dma_heap_allocation_data": "dma_heap_allocation_data",
    "dma_buf_sync": "dma_buf_sync",
}
#: kernel.yaml ioctl -> the facts' name
IOCTL_TO_FACT = {
    "DMP_DV_IOC_APPEND_CMD": "DMP_DV_IOC_APPEND_CMD", "DMP_DV_IOC_RUN": "DMP_DV_IOC_RUN",
    "DMP_DV_IOC_WAIT": "DMP_DV_IOC_WAIT",
    "DMP_DV_IOC_WAIT_V0": "DMP_DV_IOC_WAIT_before_96130ca",
    "ION_IOC_ALLOC": "ION_IOC_ALLOC", "ION_IOC_HEAP_QUERY": "ION_IOC_HEAP_QUERY",
    "DMA_HEAP_IOCTL_ALLOC": "DMA_HEAP_IOCTL_ALLOC", "DMA_BUF_IOCTL_SYNC": "DMA_BUF_IOCTL_SYNC",
}


def _spec_layout(name: str) -> tuple[int, dict[str, int]]:
    st = SPEC.struct(name)
    return st.size, {f.name: f.offset for f in st.fields}


def _fact_layout(cname: str) -> tuple[int, dict[str, int]]:
    d = STRUCTS[cname]
    return int(d["size"]), {f: int(v["offset"]) for f, v in d["fields"].items()}


@pytest.mark.parametrize("name", sorted(SPEC_TO_C))
def test_every_kernel_struct_of_the_spec_is_dmps(name):
    """Item 1: ion_heap_data was 48 bytes here, 52 in ION's uapi; item 9: any drift fails."""
    assert _spec_layout(name) == _fact_layout(SPEC_TO_C[name])


def test_every_struct_the_driver_sends_is_covered():
    kernel_structs = {d["struct"] for d in SPEC.kernel["ioctls"].values()}
    kernel_structs |= {"kbuf", "kcmdraw_header", "kconv_run", "kconv_v0", "kconv_v1",
                       "kipu_v0", "kmaximizer_v0", "ion_heap_data"}
    assert kernel_structs <= set(SPEC_TO_C)


@pytest.mark.parametrize("name", sorted(IOCTL_TO_FACT))
def test_every_ioctl_number_is_the_headers(name):
    assert SPEC.ioctl(name) == IOCTLS[IOCTL_TO_FACT[name]]
    assert set(SPEC.kernel["ioctls"]) == set(IOCTL_TO_FACT)


def test_a_drifting_field_is_seen(monkeypatch):
    """The comparison itself: a spec whose ion_heap_data lost a field fails it."""
    size, offsets = _spec_layout("ion_heap_data")
    offsets.pop("reserved2")
    assert (size - 4, offsets) != _fact_layout("ion_heap_data")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")
@pytest.mark.parametrize("bits", ["", "-m32"])
def test_c_structs_written_from_the_facts_match_the_spec(tmp_path, bits):
    """Item 9: the facts as C (tests/abi_facts.c_declarations) through the compiler's own
    layout rules, on this machine's ABI and, where the compiler takes -m32, a 32-bit one:
    every ``sizeof`` and ``offsetof`` equals firmware_spec's (one static assertion each,
    so the compiler's message names the field that differs)."""
    checks = []
    for name, cname in sorted(SPEC_TO_C.items()):
        size, offsets = _spec_layout(name)
        checks.append(f'_Static_assert(sizeof(struct {cname}) == {size}, "{name} size");')
        checks += [f'_Static_assert(offsetof(struct {cname}, {f}) == {off}, "{name}.{f}");'
                   for f, off in offsets.items()]
    src = tmp_path / "layout.c"
    src.write_text("#include <stddef.h>\n" + c_declarations() + "\n".join(checks) + "\n")
    probe = subprocess.run(["cc", *([bits] if bits else []), "-fsyntax-only", "-x", "c",
                            "-"], input="int x;\n", capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"cc {bits} does not work here: {probe.stderr.strip()[:120]}")
    build = subprocess.run(["cc", *([bits] if bits else []), "-std=c11", "-fsyntax-only",
                            str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr


def test_the_c_check_fails_on_a_drifting_spec(tmp_path):
    """The compile check catches a spec offset the facts do not have."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    src = tmp_path / "bad.c"
    src.write_text("#include <stddef.h>\n" + c_declarations()
                   + '_Static_assert(sizeof(struct ion_heap_data) == 48, "ion_heap_data");\n')
    build = subprocess.run(["cc", "-std=c11", "-fsyntax-only", str(src)],
                           capture_output=True, text=True)
    assert build.returncode != 0 and "ion_heap_data" in build.stderr
