"""dvsdk eval: datasets, metrics, local / --jobs / board farm / Dask runs, the CLI.

The reference is independent of the device path: onnxruntime on ``digits.onnx`` (the model
``digits.bin`` was compiled from) with top-k, confusion and IoU computed here in numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from dvsdk.errors import DatasetError, InvalidArgument
from dvsdk.link.agent import AgentProcess
from dvsdk.qa.dataset import open_dataset
from dvsdk.qa.evaluate import evaluate
from dvsdk.runtime.images import preprocess

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"
NET = MODELS / "digits.bin"
LABELS = (MODELS / "digits_labels.txt").read_text().split()
SPEC = {"scale": 1 / 255, "mean": [0, 0, 0], "resize": "stretch", "channel_order": "RGB"}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return make_digits(tmp_path_factory.mktemp("digits"))


def make_digits(root: Path) -> tuple[Path, dict]:
    """40 held-out digits (4 per class) as class folders and as a CSV, with onnxruntime's
    results on them."""
    data = np.load(MODELS / "digits_heldout.npz")
    rows, paths, labels = [], [], []
    for cls in range(10):
        for j, i in enumerate(np.flatnonzero(data["labels"] == cls)[:4]):
            img = (data["images"][i].astype(np.float32) * (255 / 16)).astype(np.uint8)
            folder = root / "folders" / LABELS[cls]
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{j}.png"
            Image.fromarray(img).save(path)
            rows.append(f"folders/{LABELS[cls]}/{j}.png,{LABELS[cls] if j % 2 else cls}")
            paths.append(path)
            labels.append(cls)
    (root / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    sess = ort.InferenceSession(str(MODELS / "digits.onnx"))
    scores = np.concatenate([sess.run(None, {"image": preprocess(p, (1, 1, 16, 16), SPEC)})[0]
                             for p in paths])
    order = np.argsort(-scores, axis=1, kind="stable")
    y = np.array(labels)
    conf = np.zeros((10, 10), np.int64)
    for t, p in zip(y, order[:, 0]):
        conf[t, p] += 1
    ref = {"top1": float(np.mean(order[:, 0] == y)),
           "top5": float(np.mean([t in o[:5] for t, o in zip(y, order)])), "confusion": conf,
           "top3": float(np.mean([t in o[:3] for t, o in zip(y, order)])),
           "order": {str(p): o for p, o in zip(paths, order)},
           "scores": {str(p): sc for p, sc in zip(paths, scores)}}
    return root, ref


def _same(result, ref) -> None:
    s = result.summary
    assert s["samples"] == 40
    assert s["top1"] == pytest.approx(ref["top1"]) and s["top5"] == pytest.approx(ref["top5"])
    assert np.array_equal(s["confusion"], ref["confusion"])


def test_folders_match_onnxruntime(digits):
    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    assert ds.kind == "classify" and ds.classes == LABELS
    result = evaluate(NET, ds)
    _same(result, ref)
    assert ref["top1"] > 0.8  # the test can tell a working net from a broken one
    recall = [r["recall"] for r in result.summary["per_class"]]
    assert recall == pytest.approx(list(np.diag(ref["confusion"]) / 4))


def test_csv_with_names_and_indices_gives_the_same_numbers(digits):
    root, ref = digits
    _same(evaluate(NET, open_dataset(root / "list.csv", LABELS)), ref)


def test_two_local_processes_give_identical_results(digits):
    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    a, b = evaluate(NET, ds), evaluate(NET, ds, jobs=2)
    assert a.as_json()["confusion"] == b.as_json()["confusion"]
    assert len(b.workers) == 2
    _same(b, ref)


def test_board_farm_of_two_agents(digits):
    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        result = evaluate(NET, ds, devices=[a.url, b.url])
    _same(result, ref)
    assert result.workers == [a.url, b.url]


@pytest.mark.parametrize("workers, threads", [(2, 1), (1, 2)])
def test_dask_cluster_on_loopback_matches_a_local_run(digits, workers, threads):
    """Two workers, or one worker running tasks on two threads (Dask's default is a thread
    a core): its threads take turns on the one loaded net, so each chunk's device times
    and a device failure are its own."""
    distributed = pytest.importorskip("distributed")
    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=threads,
                                  processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        result = evaluate(NET, ds, scheduler=cluster.scheduler_address)
    _same(result, ref)
    assert len(result.workers) == workers and all("127.0.0.1" in w for w in result.workers)


def seg_data(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    """A 1x1 conv segmenter whose class map is known (class = argmax over 3 linear maps of
    the image), 6 images with masks agreeing on most pixels: (net, dataset, the confusion
    computed here in numpy)."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    import dvsdk

    w = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32).reshape(3, 3, 1, 1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "seg",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor("w", onnx.TensorProto.FLOAT, w.shape, w.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    tmp_path.mkdir(parents=True, exist_ok=True)
    net = tmp_path / "seg.bin"
    dvsdk.compile(model.SerializeToString(), net, scale=1 / 255, labels=["r", "g", "b"])
    rng = np.random.default_rng(5)
    (tmp_path / "data" / "images").mkdir(parents=True)
    (tmp_path / "data" / "masks").mkdir()
    conf = np.zeros((3, 3), np.int64)
    for n in range(6):
        img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        cls = img.astype(np.int64).argmax(axis=2)
        mask = cls.copy()
        flip = rng.random((8, 8)) < 0.2
        mask[flip] = (mask[flip] + 1) % 3
        mask[0, 0] = 255                                  # ignored
        Image.fromarray(img).save(tmp_path / "data" / "images" / f"{n}.png")
        Image.fromarray(mask.astype(np.uint8), "L").save(tmp_path / "data" / "masks" / f"{n}.png")
        keep = mask != 255
        np.add.at(conf, (mask[keep], cls[keep]), 1)
    return net, tmp_path / "data", conf


def test_segmentation_miou(tmp_path):
    """mIoU, IoU and pixel accuracy against the numpy confusion of :func:`seg_data`."""
    net, data, conf = seg_data(tmp_path)
    ds = open_dataset(data, ["r", "g", "b"], 3)
    result = evaluate(net, ds)
    iou = np.diag(conf) / (conf.sum(0) + conf.sum(1) - np.diag(conf))
    assert np.array_equal(result.summary["confusion"], conf)
    assert result.summary["miou"] == pytest.approx(iou.mean())
    assert result.summary["pixel_accuracy"] == pytest.approx(np.trace(conf) / conf.sum())


def test_cli_table_json_and_confusion_png(digits, tmp_path, capsys):
    from dvsdk.cli.main import run

    root, ref = digits
    png = tmp_path / "conf.png"
    assert run(["eval", str(NET), str(root / "folders"), "--confusion", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"top-1 {ref['top1']:.2%}" in out and "seven" in out
    img = np.asarray(Image.open(png).convert("RGB"), np.int64)
    assert img.shape[0] > 100 and img.shape[1] > 100
    assert run(["eval", str(NET), str(root / "list.csv"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["top1"] == pytest.approx(ref["top1"]) and doc["classes"] == LABELS


def test_an_output_the_net_lacks_is_one_error_before_any_image(digits, capsys):
    """``--output nope``: one line naming the net's outputs, exit 2, nothing evaluated
    (it printed one identical line per image; issue 25 item 14)."""
    from dvsdk.cli.main import run

    root, _ = digits
    assert run(["eval", str(NET), str(root / "folders"), "--output", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "dvsdk: error: the net has no such output (field=output, value='nope', "
        "limit=['probs'])"] and "top-1" not in captured.out


def test_bad_images_are_reported_and_the_rest_evaluated(digits, tmp_path, capsys):
    from dvsdk.cli.main import run

    root, _ = digits
    import shutil
    shutil.copytree(root / "folders", tmp_path / "ds")
    (tmp_path / "ds" / "three" / "broken.png").write_bytes(b"not a png")
    assert run(["eval", str(NET), str(tmp_path / "ds"), "--json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["samples"] == 40 and len(doc["errors"]) == 1
    assert "broken.png" in captured.err and "cannot decode image" in captured.err


@pytest.mark.parametrize("layout, message", [
    ({"cats/a.png": b""}, "class folders do not match the net's labels"),
    ({"list.csv": b"a.png,11\n"}, "class index out of range"),
    ({"list.csv": b"a.png\n"}, "a CSV row needs two columns"),
    ({}, "the dataset holds no images"),
])
def test_malformed_datasets_are_one_clear_error(tmp_path, layout, message):
    for name, data in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    target = tmp_path / "list.csv" if "list.csv" in layout else tmp_path
    with pytest.raises(DatasetError, match=message):
        open_dataset(target, LABELS)


def test_a_relative_dataset_path_is_resolved_on_the_client(digits, tmp_path, monkeypatch):
    """Issue 29: the workers of a Dask cluster on 127.0.0.1 run in another folder than the
    client that names the dataset relatively; every image is still scored."""
    distributed = pytest.importorskip("distributed")
    root, ref = digits
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)            # the workers start here ...
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        monkeypatch.chdir(root)             # ... the client names the dataset from here
        ds = open_dataset("folders", LABELS)
        assert all(s.image.startswith(str(root)) for s in ds.samples)
        result = evaluate(NET, ds, scheduler=cluster.scheduler_address)
    assert not result.errors
    _same(result, ref)


def test_top_k_is_the_one_asked_for(digits):
    """``evaluate(top=3)``: top-1 and top-3 accuracy, against onnxruntime's ranking."""
    root, ref = digits
    s = evaluate(NET, open_dataset(root / "folders", LABELS), top=3).summary
    assert s["top1"] == pytest.approx(ref["top1"]) and s["top3"] == pytest.approx(ref["top3"])
    assert "top5" not in s
    with pytest.raises(InvalidArgument) as e:
        evaluate(NET, open_dataset(root / "folders", LABELS), top=0)
    assert e.value.field == "top_k"


def test_cli_top_k_and_expect_exit_codes(digits, capsys):
    """Issue 29 item 3: ``--top-k K`` reports top-K; ``--expect METRIC>=VALUE`` (repeatable)
    exits 6 when any is missed, naming it, and 0 when all are met; a metric the report does
    not have, or a malformed expectation, is one clear error (exit 2)."""
    from dvsdk.cli.main import run

    root, ref = digits
    base = ["eval", str(NET), str(root / "folders")]
    assert run([*base, "--top-k", "3", "--expect", f"top1>={ref['top1'] - 0.01}",
                "--expect", f"top3>={ref['top3']}", "--expect", "failed<=0"]) == 0
    captured = capsys.readouterr()
    assert f"top-3 {ref['top3']:.2%}" in captured.out and captured.err == ""
    assert run([*base, "--expect", "top1>=1.01", "--expect", "top5>=0"]) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dvsdk eval: expected top1>=1.01, got {ref['top1']:.6g}"]
    assert run([*base, "--expect", "samples<=39"]) == 6
    assert "expected samples<=39, got 40" in capsys.readouterr().err
    assert run([*base, "--expect", "miou>=0.5"]) == 2
    assert "--expect names a metric the report does not have" in capsys.readouterr().err
    assert run([*base, "--expect", "top1=0.5"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "dvsdk: error: argument --expect: 'top1=0.5' is not METRIC>=VALUE or METRIC<=VALUE; "
        "see dvsdk eval --help"]


def test_progress_has_rate_and_eta_and_periodic_lines_off_a_terminal():
    """Issue 29 item 3: on a terminal one redrawn line with the rate and the time left;
    elsewhere (a log, CI) a line every 10 s; nothing for --quiet/--json."""
    import io

    from dvsdk.cli.eval import _progress

    t = [100.0]
    out = io.StringIO()
    lines = _progress("lines", clock=lambda: t[0], every=10.0, stream=out)
    for done in (1, 2, 3):            # 3 images in 9 s: nothing yet
        t[0] += 3.0
        lines(done, 30)
    assert out.getvalue() == ""
    t[0] += 3.0                       # 4 images in 12 s: 0.33/s, 26 left: 78 s
    lines(4, 30)
    assert out.getvalue() == "dvsdk eval: 4/30 images, 0.3/s, ETA 1m18s\n"
    t[0] += 1.0
    lines(5, 30)                      # within 10 s of the last line
    assert out.getvalue().count("\n") == 1
    bar = io.StringIO()
    t0 = t[0]
    draw = _progress("bar", clock=lambda: t[0], stream=bar)
    t[0] = t0 + 2.0
    draw(10, 40)                      # 5/s, 30 left: 6 s
    assert bar.getvalue().endswith("10/40 5.0/s ETA 6s")
    draw(40, 40)
    assert bar.getvalue().endswith("\r\x1b[K")
    assert _progress("off") is None


def test_per_image_results_as_json_lines_and_csv(digits, tmp_path, capsys):
    """Issue 29 item 3: ``--per-image FILE`` (.jsonl or .csv): each image's path, label,
    prediction, top-k with scores (onnxruntime's ranking and scores, within FP16), device
    time; a broken image is a row with its error; another suffix is one clear error."""
    import csv
    import shutil

    from dvsdk.cli.main import run

    root, ref = digits
    shutil.copytree(root / "folders", tmp_path / "ds")
    (tmp_path / "ds" / "three" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "per.jsonl"
    assert run(["eval", str(NET), str(tmp_path / "ds"), "--per-image", str(out),
                "--top-k", "3", "-q"]) == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 41
    bad = [r for r in rows if "error" in r]
    assert len(bad) == 1 and bad[0]["path"].endswith("broken.png")
    for r in rows:
        if "error" in r:
            continue
        src = str(root / "folders" / Path(r["path"]).relative_to(tmp_path / "ds"))
        order, scores = ref["order"][src], ref["scores"][src]
        assert r["label"] == Path(r["path"]).parent.name
        assert r["top_k"] == [LABELS[i] for i in order[:3]] and r["prediction"] == r["top_k"][0]
        assert np.allclose(r["scores"], scores[order[:3]], atol=2e-2)
        assert r["device_us"] > 0
    table = tmp_path / "per.csv"
    assert run(["eval", str(NET), str(root / "folders"), "--per-image", str(table), "-q"]) == 0
    got = list(csv.DictReader(table.open()))
    assert len(got) == 40 and len(json.loads(got[0]["top_k"])) == 5 and not got[0]["error"]
    capsys.readouterr()
    assert run(["eval", str(NET), str(root / "folders"), "--per-image",
                str(tmp_path / "per.txt")]) == 2
    assert "--per-image writes .jsonl or .csv" in capsys.readouterr().err


def test_confusion_figure_has_titles_labels_and_counts():
    """Issue 29 item 3: axis titles, a title, the class names as ticks, each non-zero cell
    printed with its count and the colour its row share (numpy here is the reference)."""
    import matplotlib.pyplot as plt

    from dvsdk.qa.plots import confusion_figure

    conf = np.diag([4] * 10)
    conf[3, 3], conf[3, 5], conf[8, 8], conf[8, 1] = 3, 1, 2, 2
    fig = confusion_figure(conf, LABELS)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    assert "confusion matrix" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == LABELS
    assert [t.get_text() for t in ax.get_yticklabels()] == LABELS
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): int(t.get_text())
             for t in ax.texts}
    assert cells == {(int(i), int(j)): int(conf[i, j]) for i, j in zip(*np.nonzero(conf))}
    share = ax.images[0].get_array()
    assert np.allclose(share, conf / conf.sum(axis=1, keepdims=True))
    plt.close(fig)


def test_confusion_figure_at_1000_classes_shows_the_largest_confusions():
    """1,000 classes: the figure shows the 30 classes of the 15 largest confusions (planted
    here, each pair side by side), an 'other' column with the rest of each row, and says
    so in its title; at most 30 rows, so names stay readable."""
    import matplotlib.pyplot as plt

    from dvsdk.qa.plots import confusion_figure

    k = 1000
    rng = np.random.default_rng(3)
    conf = np.diag(rng.integers(40, 60, k)).astype(np.int64)
    pairs = rng.permutation(k)[:30].reshape(15, 2)
    for n, (t, p) in enumerate(pairs):
        conf[t, p] = 40 - 2 * n                    # 40, 38, ... 12: a strict order
    noise = rng.integers(0, k, (200, 2))
    noise = noise[noise[:, 0] != noise[:, 1]]
    np.add.at(conf, (noise[:, 0], noise[:, 1]), 1)   # small confusions: ones and twos
    names = [f"class {i}" for i in range(k)]
    fig = confusion_figure(conf, names, top=30)
    ax = fig.axes[0]
    shown = pairs.ravel()
    assert [t.get_text() for t in ax.get_yticklabels()] == [names[i] for i in shown]
    assert [t.get_text() for t in ax.get_xticklabels()] == [names[i] for i in shown] + [
        "other"]
    assert "30 classes of the largest confusions (of 1000)" in ax.get_title()
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    share = np.asarray(ax.images[0].get_array())
    rows = conf[shown].sum(axis=1)
    other = rows - conf[np.ix_(shown, shown)].sum(axis=1)
    assert np.allclose(share[:, :30], conf[np.ix_(shown, shown)] / rows[:, None])
    assert np.allclose(share[:, 30], other / rows)
    assert min(t.get_fontsize() for t in ax.get_yticklabels()) >= 6
    plt.close(fig)
