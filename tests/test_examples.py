"""The examples run as users run them (a real subprocess), and the README stays true.

Each example runs with small arguments on the simulator and its output is checked; the
README's supported-ops table must match the compiler's tables (tools/gen_ops_table.py),
and the Quick start command must name files that exist and classify correctly.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

EXAMPLES = ROOT / "examples"
MODELS = EXAMPLES / "models"
SAMPLES = MODELS / "samples"
README = ROOT / "README.md"


def run(*args: str | Path, cwd: Path | None = None, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    """``python args...`` with the checkout importable and the default device forced to sim."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("DVSDK_DEVICE", None)
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.png"))


# -- the examples ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["classify", "segment", "benchmark", "raw_commands",
                                  "openvx_lenet"])
def test_example_has_main_and_help(name):
    src = (EXAMPLES / f"{name}.py").read_text()
    assert "def main(argv: list[str] | None = None) -> int:" in src
    assert 'if __name__ == "__main__":' in src
    out = ok(run(EXAMPLES / f"{name}.py", "--help"))
    assert out.startswith("usage:")


@pytest.mark.parametrize("name", ["classify", "segment", "benchmark", "raw_commands",
                                  "openvx_lenet"])
def test_example_on_a_missing_board_says_one_line(name):
    """The README's board command (``--device uio://``) on a machine without a board: one
    line on stderr naming the cause, a non-zero exit, no traceback (as dvsdk's own tools);
    ``--debug`` shows the traceback."""
    proc = run(EXAMPLES / f"{name}.py", "--device", "uio://")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "UIO" in lines[0]
    if name == "openvx_lenet":  # an OpenVX program: the graph's verification status
        assert lines[0].startswith("verification failed: ERROR_NO_RESOURCES")
        return
    assert lines[0].startswith(f"{name}.py: error: ")
    debug = run(EXAMPLES / f"{name}.py", "--device", "uio://", "--debug")
    assert debug.returncode == proc.returncode and "Traceback" in debug.stderr


def test_classify_default_is_a_correct_digit(tmp_path):
    out = ok(run(EXAMPLES / "classify.py", cwd=tmp_path))   # works from any directory
    assert re.search(r"seven_1442\.png: seven \(\d+\.\d%\), device [\d.]+ us  \[correct\]", out)
    assert "1/1 correct" in out
    assert "predicted by the simulator" in out


def test_classify_every_sample_gets_its_label():
    paths = samples()
    assert len(paths) >= 10
    out = ok(run(EXAMPLES / "classify.py", SAMPLES, "-k", "2"))
    got = dict(re.findall(r"^(\S+\.png): (\S+) \(", out, re.M))
    assert len(got) == len(paths)
    for path in paths:
        assert got[str(path)] == path.stem.split("_")[0], out
    assert f"{len(paths)}/{len(paths)} correct" in out
    assert len(re.findall(r"^\s+\d+\.\d\d%\s+\d+\s+\w+$", out, re.M)) == 2 * len(paths)


def test_segment_writes_a_mask_png_of_the_input_size(tmp_path):
    from PIL import Image

    mask = tmp_path / "mask.png"
    out = ok(run(EXAMPLES / "segment.py", "--size", "24x40", "-o", mask, cwd=tmp_path))
    with Image.open(mask) as img:
        assert img.format == "PNG" and img.mode == "RGB"
        assert img.size == (40, 24)                    # (width, height)
        colors = {c for _, c in img.getcolors()}
    assert colors <= {(0, 0, 0), (230, 40, 40), (40, 200, 60), (50, 90, 240)}
    assert len(colors) == 4                            # all four classes show up
    assert "class map by the maximizer unit" in out
    assert "agrees with numpy argmax on 100.00% of pixels" in out
    assert "the same map" in out
    acc = float(re.search(r"ground truth: ([\d.]+)%", out).group(1))
    assert acc > 95
    assert not list(tmp_path.glob("*.bin"))            # the net.bin was temporary


def test_segment_cpu_argmax_and_an_image_file(tmp_path):
    from PIL import Image

    img = Image.new("RGB", (30, 20), (10, 10, 10))
    img.paste((240, 20, 20), (0, 0, 15, 20))
    img.save(tmp_path / "half_red.png")
    out = ok(run(EXAMPLES / "segment.py", tmp_path / "half_red.png", "--size", "20x30",
                 "--cpu-argmax", "-o", tmp_path / "m.png"))
    assert "numpy argmax on the CPU" in out
    counts = dict(re.findall(r"^\s+(\w+)\s+(\d+) px", out, re.M))
    assert int(counts["red"]) + int(counts["background"]) == 600
    assert abs(int(counts["red"]) - 300) <= 20


def test_benchmark_prints_stages_and_fps():
    out = ok(run(EXAMPLES / "benchmark.py", "--runs", "3"))
    for stage in ("compile (ONNX -> net.bin)", "load", "first run", "preprocess", "pack",
                  "cache sync", "device, predicted", "unpack", "cpu ops", "run total, wall"):
        assert stage in out
    assert re.search(r"FPS: [\d,.]+ wall-clock", out)
    assert re.search(r"FPS: [\d,]+ device-bound \([\d.]+ us of device time per run, "
                     r"predicted\)", out)
    assert "predicted by its cycle model" in out


def test_benchmark_shows_the_double_buffering_gain():
    import re

    out = ok(run(EXAMPLES / "benchmark.py", "--runs", "4"))
    m = re.search(r"run_async, double-buffered .*: ([\d.]+) ms sequential -> ([\d.]+) ms "
                  r"overlapped \(x([\d.]+) throughput\)", out)
    assert m, out
    seq, pipe, gain = (float(g) for g in m.groups())
    assert pipe <= seq and gain >= 1.0


def test_benchmark_takes_a_net_bin():
    out = ok(run(EXAMPLES / "benchmark.py", MODELS / "digits.bin", "-n", "2"))
    assert "compile (skipped: net.bin given)" in out and "device-bound" in out


def test_raw_commands_match_numpy_exactly():
    out = ok(run(EXAMPLES / "raw_commands.py"))
    assert re.search(r"max error vs numpy 0\n", out), out
    assert "bit for bit" in out and "cycles" in out
    out = ok(run(EXAMPLES / "raw_commands.py", "--size", "9x15", "--channels", "5",
                 "--filters", "3", "--kernel", "5"))
    assert "output 4x7x3: max error vs numpy 0\n" in out


def test_raw_commands_float_data_within_fp16_tolerance():
    out = ok(run(EXAMPLES / "raw_commands.py", "--data", "floats", "--size", "8x8"))
    err = float(re.search(r"max error vs numpy ([\d.e-]+)", out).group(1))
    assert 0 < err < 0.05 and "within the FP16 tolerance" in out


def test_openvx_lenet_classifies_like_the_compiled_onnx_and_times_every_node():
    out = ok(run(EXAMPLES / "openvx_lenet.py", SAMPLES, "-n", "3"))
    assert "rebuilt as 8 OpenVX nodes, verified" in out
    assert "10/10 correct" in out and out.count("[correct]") == 10
    assert "largest difference from digits.bin (the same network compiled from ONNX): 0\n" in out
    rows = dict(re.findall(r"^  (\w+)\s+(?:DV700|CPU)\s+([\d.]+)", out, re.M))
    assert set(rows) == {"conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "fc", "softmax"}
    assert all(float(v) > 0 for v in rows.values())
    assert re.search(r"^softmax\s+softmax_layer\s+CPU", out, re.M)
    assert re.search(r"^conv1\s+convolution_layer\s+DV700", out, re.M)
    assert re.search(r"perf over 13 executions", out)
    assert re.search(r"^  graph\s+[\d.]+", out, re.M)


# -- the README ------------------------------------------------------------------------

def test_readme_ops_table_is_up_to_date():
    proc = run(ROOT / "tools" / "gen_ops_table.py", "--check")
    assert proc.returncode == 0, (proc.stdout + proc.stderr + "\nrun: python3 "
                                  "tools/gen_ops_table.py --write")


def test_ops_table_check_detects_and_fixes_a_stale_table(tmp_path):
    readme = tmp_path / "README.md"
    text = README.read_text()
    readme.write_text(text.replace("| `Conv` |", "| `Conv` | stale |", 1))
    assert run(ROOT / "tools" / "gen_ops_table.py", "--check", "--readme", readme
               ).returncode == 1
    ok(run(ROOT / "tools" / "gen_ops_table.py", "--write", "--readme", readme))
    assert readme.read_text() == text
    ok(run(ROOT / "tools" / "gen_ops_table.py", "--check", "--readme", readme))


def test_ops_table_comes_from_the_compiler_tables():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_ops_table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from dvsdk.compiler.hwmap import HARDWARE_OPS
    from dvsdk.cpu.ops import COMPILER_OPS, KERNELS

    block = gen_ops_table.render()
    for op, how in HARDWARE_OPS.items():
        assert f"| `{op}` | {how.replace('|', chr(92) + '|')} |" in block
    for op in set(KERNELS) - set(HARDWARE_OPS) - COMPILER_OPS:
        assert f"`{op}`" in block
    assert COMPILER_OPS and all(f"`{op}`" not in block for op in COMPILER_OPS)


def _quick_start() -> list[str]:
    m = re.search(r"## Quick start.*?```sh\n(.*?)```.*?```sh\n(.*?)```", README.read_text(),
                  re.S)
    assert m, "README has no Quick start with two sh blocks"
    return [m.group(1).strip(), m.group(2).strip()]


def test_quick_start_classifies_a_sample():
    first, _ = _quick_start()
    install, _, cmd = first.partition(" && ")
    assert install == "python3 -m pip install -e ."
    argv = shlex.split(cmd)
    assert argv[0] == "dvsdk-run" and len(argv) == 3
    net, image = ROOT / argv[1], ROOT / argv[2]
    assert net.is_file() and image.is_file()
    out = ok(run("-m", "dvsdk.cli.run", net, image))   # what the dvsdk-run script calls
    assert out.splitlines()[1].split()[-1] == image.stem.split("_")[0]


def test_quick_start_tests_are_what_ci_runs():
    _, second = _quick_start()
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip().startswith("python3 ")]
    assert second == " && ".join(ci)
