"""Recorded bench results: a report's provenance, the file schema, and the files the
repository ships for lesson 06."""

import json

import pytest
import torch
from paths import RESULTS_DIR as REPO_RESULTS

from amp_lessons.measure import bench_results

TINY = {"mlp": {"width": 32, "layers": 3, "batch": 8}}
REPO_FILES = sorted(REPO_RESULTS.glob("bench_*.json"))

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


@pytest.fixture(scope="module")
def tiny_report():
    return bench_results.bench_report(
        "cpu",
        configs=("mlp",),
        sizes=TINY,
        warmup=1,
        iters=2,
        command="pytest tiny bench",
    )


def test_results_file_round_trip_and_schema(tiny_report, tmp_path):
    path = bench_results.save_results(tiny_report, tmp_path / "out.json")
    report = bench_results.load_results(path)
    assert report == json.loads(json.dumps(tiny_report))
    for key in ("device", "torch", "date", "command", "results", "sizes", "iters"):
        assert key in report
    assert report["schema"] == bench_results.SCHEMA
    assert report["device"] == "cpu" and report["torch"] == torch.__version__
    assert report["command"] == "pytest tiny bench"
    assert report["sizes"] == TINY
    assert report["cpu_threads"] == 1  # the CPU default, see run_bench
    assert report["notes"][0] == bench_results.FLOPS_NOTE
    assert any("peak_mem_bytes is None" in n for n in report["notes"])
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.pop("torch"), "missing top-level key 'torch'"),
        (lambda r: r["results"].clear(), "'results' is empty"),
        (lambda r: r["results"][0].pop("step_ms"), r"results\[0\] lacks 'step_ms'"),
        (
            lambda r: r["results"][1].update(precision="fp64"),
            "unknown precision 'fp64'",
        ),
        (lambda r: r["results"][2].update(step_ms="fast"), "not of the expected type"),
        (lambda r: r["results"][2].update(activation_bytes=1.5), "not of the expected"),
        (lambda r: r["results"][0].update(step_ms=0), "step_ms must be > 0"),
    ],
)
def test_load_results_names_what_is_wrong(tiny_report, tmp_path, damage, message):
    report = json.loads(json.dumps(tiny_report))
    damage(report)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ValueError, match=message):
        bench_results.load_results(path)
    with pytest.raises(ValueError, match=message):
        bench_results.save_results(report, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()


def test_load_results_refuses_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "bench_x.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read bench results"):
        bench_results.load_results(path)
    with pytest.raises(ValueError, match="cannot read bench results"):
        bench_results.load_results(tmp_path / "missing.json")


def test_recorded_results_reads_every_bench_file(tiny_report, tmp_path):
    bench_results.save_results(
        tiny_report, tmp_path / bench_results.results_filename("NVIDIA H200")
    )
    (tmp_path / "other.json").write_text("{}")  # not a bench_*.json: not read
    assert [r["command"] for r in bench_results.recorded_results(tmp_path)] == [
        "pytest tiny bench"
    ]
    assert bench_results.recorded_results(tmp_path / "empty") == []
    assert bench_results.results_filename("NVIDIA H200") == "bench_h200.json"
    name = "NVIDIA A100-SXM4-80GB"
    assert bench_results.results_filename(name) == "bench_a100_sxm4_80gb.json"


def test_recorded_results_refuses_a_broken_file_instead_of_skipping_it(
    tiny_report, tmp_path
):
    bench_results.save_results(tiny_report, tmp_path / "bench_h200.json")
    broken = json.loads(json.dumps(tiny_report))
    del broken["results"][0]["step_ms"]
    (tmp_path / "bench_a100.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"bench_a100.json: results\[0\] lacks"):
        bench_results.recorded_results(tmp_path)


def test_lesson_06_reads_the_repos_results_folder():
    """The folder the notebooks read is this one, and it says how files get there;
    every bench_*.json in it is checked by the next test, one case per file."""
    assert bench_results.RESULTS_DIR == REPO_RESULTS
    readme = (REPO_RESULTS / "README.md").read_text()
    assert "python -m amp_lessons bench --device cuda --record" in readme
    assert len(bench_results.recorded_results()) == len(REPO_FILES)


NO_FILES = pytest.param(
    None,
    id="none",
    marks=pytest.mark.skip(
        reason="no bench_*.json recorded in notebooks/results yet: no file to validate"
    ),
)


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.name) for p in REPO_FILES] or [NO_FILES]
)
def test_every_results_file_in_the_repo_is_valid(path):
    report = bench_results.load_results(path)  # the schema, or a ValueError
    assert report["device"] == "cuda" and report["gpu"]
    assert path.name == bench_results.results_filename(report["device_name"])
    assert report["command"].startswith(
        ("python -m amp_lessons bench", "python -m amp_lessons gpu-check")
    )


def test_results_dir_is_the_clones_and_falls_back_to_the_working_folder(
    tmp_path, monkeypatch
):
    assert bench_results.find_results_dir() == bench_results.RESULTS_DIR
    assert bench_results.RESULTS_DIR.parts[-2:] == ("notebooks", "results")
    monkeypatch.setattr(
        bench_results,
        "__file__",
        str(tmp_path / "site" / "amp_lessons" / "measure" / "bench_results.py"),
    )
    monkeypatch.chdir(tmp_path)
    assert bench_results.find_results_dir() == tmp_path / "results"
