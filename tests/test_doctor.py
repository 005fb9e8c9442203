"""``dvsdk doctor``: real sysfs-shaped trees, a fake board made of files, real processes."""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from dvsdk.cli import doctor
from dvsdk.driver.uio import UioDevice

from .fakeboard import make_fake_board


def run(argv: list[str], **kw) -> tuple[int, str]:
    out = io.StringIO()
    rc = doctor.main(argv, out=out, **kw)
    return rc, out.getvalue()


def empty_root(tmp_path: Path) -> str:
    (tmp_path / "sys").mkdir()
    (tmp_path / "dev").mkdir()
    return f"uio://?sysfs={tmp_path}/sys&dev={tmp_path}/dev"


@pytest.fixture
def board(tmp_path):
    b = make_fake_board(tmp_path, core="stub")
    yield b
    b.close()


# -- no board ------------------------------------------------------------------------------
def test_machine_without_a_board_says_so_with_fixes(tmp_path):
    rc, out = run(["--device", empty_root(tmp_path)])
    assert rc == 3
    assert "No DV700 board found on this machine" in out
    assert "[FAIL] uio: no UIO devices at all" in out
    assert "fix: give the DT node compatible = \"dmp,dv700\"" in out
    assert "uio_pdrv_genirq.of_id=dmp,dv700" in out
    assert "[FAIL] dma: no u-dma-buf buffer" in out and "modprobe u-dma-buf" in out


def test_other_uio_devices_are_named(tmp_path):
    url = empty_root(tmp_path)
    node = tmp_path / "sys" / "class" / "uio" / "uio0"
    node.mkdir(parents=True)
    (node / "name").write_text("axi-gpio\n")
    rc, out = run(["--device", url])
    assert rc == 3 and "no DV700 UIO device found; other UIO devices: uio0 ('axi-gpio')" in out


def test_kernel_driver_instead_of_uio(tmp_path):
    url = empty_root(tmp_path)
    (tmp_path / "sys" / "class" / "dmp_dv" / "dv_conv").mkdir(parents=True)
    rc, out = run(["--device", url])
    assert rc == 3 and "[FAIL] kernel driver: the DMP kernel driver is loaded" in out
    assert "--device dv://" in out and "unload the module" in out


def test_dma_heaps_alone_are_not_enough(tmp_path):
    b = make_fake_board(tmp_path, core="stub", heaps=("linux,cma",))
    try:
        shutil.rmtree(b.sysfs / "class" / "u-dma-buf")
        rc, out = run(["--device", b.url.replace("&dma=udmabuf0", "")])
        assert rc == 3 and "dma-heaps linux,cma exist" in out and "physical address" in out
    finally:
        b.close()


def test_bad_arguments_exit_2(tmp_path):
    assert run(["--device", "uio://?sysfs"])[0] == 2
    assert run(["--device", empty_root(tmp_path), str(tmp_path / "missing.bin")])[0] == 2
    assert run(["--no-such-flag"])[0] == 2


# -- the fake board -------------------------------------------------------------------------
def test_fake_board_passes(board):
    rc, out = run(["--device", board.url])
    assert rc == 0, out
    assert "All checks passed" in out and "[FAIL]" not in out
    for line in ("[ OK ] uio: board 0: per-unit: conv=uio0", "[ OK ] fpga: fpga0: operating",
                 "[ OK ] dma: udmabuf0: 64.0 MiB at 0x70000000",
                 "[ OK ] coherence: non-coherent; caches synced with the u-dma-buf ioctls",
                 "[ OK ] hw version: 0700", "[ OK ] ubuf: 524288 bytes (from register)",
                 "[ OK ] mac: 576 MACs (8 x 72)", "[WARN] clock: conv clock unknown",
                 "fix: pass clock_mhz=<MHz> in the device URL"):
        assert line in out, line
    assert "device node: " + str(board.dev / "uio2") in out
    # opened with init=0: nothing written (the direct kick's probe writes 0x40C and 0x44)
    assert board.regs["conv"][0x44 // 4] == 0 and board.regs["conv"][0x40C // 4] == 0


def test_clock_and_coherence_variants(tmp_path):
    b = make_fake_board(tmp_path, core="stub", conv_freq=300, dma_coherent=True,
                        mode="combined")
    try:
        rc, out = run(["--device", b.url])
        assert rc == 0, out
        assert "[ OK ] clock: 300 MHz from kernel sysfs conv_freq" in out
        assert "dma_coherent=1: hardware-coherent" in out
        assert "[WARN] interrupts: uio0 carries 3 units on one UIO interrupt" in out
        attrs = b.sysfs / "class" / "u-dma-buf" / "udmabuf0"
        (attrs / "dma_coherent").write_text("0\n")
        (attrs / "driver_version").write_text("4.0.0\n")
        (b.sysfs / "class" / "dmp_dv" / "dv_conv" / "conv_freq").unlink()
        rc, out = run(["--device", b.url + "&clock_mhz=250"])
        assert rc == 0 and "250 MHz from the URL" in out
        assert "caches synced through sysfs (driver 4.0.0)" in out
    finally:
        b.close()


def test_dma_size_against_the_network(board, tmp_path, monkeypatch):
    rc, out = run(["--device", board.url], required_dma=1 << 30)
    assert rc == 3
    assert "[FAIL] dma size: the network needs 1024.0 MiB, udmabuf0 has 64.0 MiB" in out
    assert "fix: reload u-dma-buf with udmabuf0=1073741824 or more" in out
    assert "[ OK ] hw version" in out  # the rest of the board was still checked
    net = tmp_path / "net.bin"
    net.write_bytes(b"\0" * 64)
    rc, out = run(["--device", board.url, str(net)])  # not a net.bin: one clear line
    assert rc == 2 and "not a dvsdk net.bin" in out
    from dvsdk.compiler.build import compile as compile_model

    from .onnx_models import conv_bn_relu

    real = tmp_path / "real.bin"
    compile_model(conv_bn_relu(), real, golden=False)
    seen = []
    rc, out = run(["--device", board.url, str(real)],
                  required_dma=lambda p: seen.append(p) or 1 << 20)
    assert rc == 0 and seen == [str(real)] and "needs 1.0 MiB of 64.0 MiB" in out
    rc, out = run(["--device", board.url, str(real)])  # sized from the file itself
    assert rc == 0 and re.search(r"\[ OK \] dma size: the network needs \d+ B of 64.0 MiB", out)
    monkeypatch.setattr("dvsdk.netfile.dma_bytes", lambda f: 128 << 20)
    rc, out = run(["--device", board.url, str(real)])
    assert rc == 3 and "needs 128.0 MiB" in out


def test_dma_above_4gib_is_refused(tmp_path):
    b = make_fake_board(tmp_path, core="stub", dma_phys=0xFFF0_0000)
    try:
        rc, out = run(["--device", b.url])
        assert rc == 3 and "above the DV700's 32-bit DMA range" in out
    finally:
        b.close()


def test_busy_board_names_the_holder(board):
    with UioDevice.from_url(board.url):
        rc, out = run(["--device", board.url])
    assert rc == 3 and f"[FAIL] open: DV700 is in use by pid {os.getpid()}" in out


def test_unprogrammed_pl_stops_before_register_reads(board):
    (board.sysfs / "class" / "fpga_manager" / "fpga0" / "state").write_text("unknown\n")
    rc, out = run(["--device", board.url])
    assert rc == 3 and "PL not programmed" in out and "fpgautil" in out
    assert "hw version" not in out


def test_dead_registers_fail(tmp_path):
    b = make_fake_board(tmp_path, core="stub", start=False)
    try:
        b.regs["conv"][0x140 // 4] = 0xFFFF  # a pre-R5 board (the direct kick): 0x140, 0x14C
        b.regs["conv"][0x14C // 4] = 0
        rc, out = run(["--device", b.url])
        assert rc == 3 and "reg 0x140 reads 0xffff" in out and "reg 0x14c reads 0 MACs" in out
    finally:
        b.close()


def test_non_board_url_just_opens_the_device():
    pytest.importorskip("dvsdk.sim.device")
    rc, out = run(["--device", "sim://"])
    assert rc == 0 and "[ OK ] device: sim opened" in out
    assert "simulator: compiled loops" in out or "simulator: numpy" in out


# -- permissions and the dvsdk group (as an ordinary user) --------------------------------------
def run_as_nobody(argv: list[str]) -> tuple[int, str]:
    """Run the doctor in a forked child that dropped root for uid/gid 65534 (no exec, so
    the interpreter's own location does not need to be readable by that user)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        rc = 99
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = io.StringIO()
            rc = doctor.main(argv, out=out)
            os.write(w, out.getvalue().encode())
        except BaseException as e:  # noqa: BLE001 - report anything to the parent
            os.write(w, f"child error: {e!r}".encode())
        finally:
            os._exit(rc)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


def test_permission_and_group_problems_are_explained():
    root = Path(tempfile.mkdtemp(prefix="dvsdk-doctor-"))
    os.chmod(root, 0o755)  # traversable by the unprivileged user
    b = make_fake_board(root, core="stub", start=False)  # no thread: we fork
    try:
        for node in ("uio0", "uio1", "uio2", "udmabuf0"):
            os.chmod(b.dev / node, 0o600 if os.geteuid() == 0 else 0)
        args = ["--device", b.url]
        rc, out = run_as_nobody(args) if os.geteuid() == 0 else run(args)
        assert rc == 3, out
        assert "permission denied for this user" in out
        assert "sudo cp udev/99-dmp-dv700.rules /etc/udev/rules.d/" in out
        assert "[FAIL] group:" in out and "usermod -aG dvsdk" in out
        assert "[ OK ] open" not in out
    finally:
        b.close()
        shutil.rmtree(root, ignore_errors=True)


# -- a net.bin against the device it would run on --------------------------------------------
def test_the_network_must_fit_the_device(tmp_path):
    """The doctor applies the runtime's own check: what it passes, ``dvsdk.load`` loads."""
    pytest.importorskip("dvsdk.sim.device")
    import dvsdk
    from dvsdk.errors import NetFileError

    from .onnx_models import conv_bn_relu

    net = tmp_path / "net.bin"
    dvsdk.compile(conv_bn_relu(), net, golden=False)     # for a 512 KiB unified buffer
    small = "sim://?ub_size=65536"
    rc, out = run(["--device", small, str(net)])
    assert rc == 3 and "All checks passed" not in out
    assert ("[FAIL] net.bin: net.bin does not fit this device: net.bin needs a unified "
            "buffer of 524288 bytes") in out
    assert "fix: recompile with --ub-size for this device" in out
    with pytest.raises(NetFileError, match="unified buffer of 524288"):
        dvsdk.load(net, small)                            # what dvsdk-run then refuses
    rc, out = run(["--device", "sim://", str(net)])
    assert rc == 0 and "[ OK ] net.bin: net.bin fits this device" in out
    with dvsdk.load(net, "sim://"):
        pass


def test_the_network_is_checked_against_a_board(tmp_path):
    import dvsdk

    from .onnx_models import conv_bn_relu

    net = tmp_path / "net.bin"
    dvsdk.compile(conv_bn_relu(), net, golden=False)
    b = make_fake_board(tmp_path / "board", core="stub", ubuf_size=256 * 1024)
    try:
        rc, out = run(["--device", b.url, str(net)])
        assert rc == 3 and "[ OK ] ubuf: 262144 bytes" in out
        assert ("[FAIL] net.bin: net.bin does not fit this device: net.bin needs a unified "
                "buffer of 524288 bytes; the device has 262144") in out
    finally:
        b.close()
    rc, out = run(["--device", empty_root(tmp_path), str(net)])   # no board: said, not faked
    assert rc == 3 and "[INFO] net.bin: net.bin not checked against the device" in out
