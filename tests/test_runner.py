"""The GPU runner's recording machinery, exercised on the CPU: a notebook with a widget, a progress bar and
a figure is executed in place by nbclient, stamped with provenance, and left with no live-widget state."""
import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from labkit.runner import provenance
from labkit.runner.gpu_check import WIDGET_NOTE, execute_notebooks

FAKE_GPU = {"name": "Test GPU", "compute_capability": "9.0", "driver": "580", "cuda_runtime": "13.0", "cupy": "14"}


def test_record_executes_stamps_and_strips_widgets(tmp_path):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        new_code_cell("import ipywidgets as w\nimport matplotlib.pyplot as plt\n"
                      "def f(a=1):\n    plt.plot([0, 1], [a, a]); plt.show()\n"
                      "w.interactive(f, a=w.IntSlider(value=1, min=0, max=3))"),
        new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(3)): pass"),
        new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n"
                      "# 01-roofline/01_copy_scalar.cu is named here, so the recording hashes it"),
    ]
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(path))
    ok, msg = execute_notebooks([path], timeout=120, gpu=FAKE_GPU)
    assert ok, msg
    out = nbformat.read(str(path), as_version=4)
    prov = out.metadata["labkit"]["provenance"]
    assert prov["gpu"] == "Test GPU" and prov["kernels"] == {
        "01-roofline/01_copy_scalar.cu": provenance.kernel_hash("01-roofline/01_copy_scalar.cu")}
    assert "widgets" not in out.metadata
    first = out.cells[0].outputs   # the control's own figure for its defaults is dropped: only the note stays
    assert [o.get("data", {}).get("text/plain") for o in first] == [WIDGET_NOTE]
    assert any("image/png" in o.get("data", {}) for o in out.cells[2].outputs)
    assert provenance.problems(path) == []


def test_execution_client_does_not_imitate_the_output_widget(tmp_path):
    # nbclient's Output-widget stand-in sends on the shell channel while a cell's reply is awaited there,
    # which can stall a cell (nbclient issue 312): the recording client must not create one.
    from labkit.runner.gpu_check import execution_client
    nb = new_notebook()
    client = execution_client(nb, tmp_path / "x.ipynb", 60)
    msg = {"msg_type": "comm_open", "content": {"comm_id": "c1", "target_name": "jupyter.widget",
                                                 "data": {"state": {"_model_name": "OutputModel"}}}}
    client.handle_comm_msg([], msg, 0)
    assert client.comm_objects == {}


def test_a_failing_notebook_is_reported_and_left_unrecorded(tmp_path):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [new_code_cell("raise RuntimeError('kernel fault')")]
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, str(path))
    ok, msg = execute_notebooks([path], timeout=60, gpu=FAKE_GPU)
    assert not ok and "bad.ipynb" in msg and "CellExecutionError" in msg
    assert "provenance" not in nbformat.read(str(path), as_version=4).metadata.get("labkit", {})


def test_nbval_accepts_a_recording_and_rejects_a_changed_output(tmp_path):
    from labkit.runner.gpu_check import run_nbval
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    timing = new_code_cell("import time\nprint(f'took {time.perf_counter()} s')")
    timing.metadata["tags"] = ["nbval-ignore-output"]          # a timing: exempt from comparison
    nb.cells = [new_code_cell("print('ok  n=1000003')"), timing,
                new_code_cell("print('speed: PASS [94.3% of copy: 3914 vs 4151 GB/s, 0.2743 ms], needs 90% of copy')")]
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(path))
    assert execute_notebooks([path], timeout=60, gpu=FAKE_GPU)[0]
    assert run_nbval([path])[0]
    out = nbformat.read(str(path), as_version=4)
    out.cells[0].outputs[0]["text"] = "ok  n=7\n"                # a deterministic output that no longer matches
    nbformat.write(out, str(path))
    assert not run_nbval([path])[0]


def test_nbval_keeps_each_notebook_in_one_worker(monkeypatch):
    # With pytest-xdist present (as on the GPU runner), nbval's items are single cells; without
    # --dist loadfile they are spread over workers and run without their notebook's earlier cells.
    import sys
    import types
    from labkit.runner.gpu_check import nbval_command
    monkeypatch.setitem(sys.modules, "xdist", types.ModuleType("xdist"))
    cmd = nbval_command(["a.ipynb", "b.ipynb", "c.ipynb"], workers=4)
    i = cmd.index("-n")
    assert cmd[i + 1] == "3" and cmd[cmd.index("--dist") + 1] == "loadfile"
    # by default one notebook at a time: grade cells print speed verdicts that a shared GPU can flip
    default = nbval_command(["a.ipynb", "b.ipynb", "c.ipynb"])
    assert "-n" not in default and default[-3:] == ["a.ipynb", "b.ipynb", "c.ipynb"]


def test_a_chapters_bench_rewrites_only_its_own_result_lines():
    """gpu-check --chapter 03 rewrites the result lines of chapter 03's kernels only: another chapter's new
    kernel, whose records only its own run makes, does not fail it."""
    from labkit.paths import KERNELS
    from labkit.runner.gpu_check import chapter_kernel_files
    files = chapter_kernel_files(["03"])
    assert files and all(f.parent.name.startswith("03-") and f.suffix == ".cu" for f in files)
    assert set(files) == set((KERNELS / "03-elementwise").glob("*.cu"))
    assert {f.parent.name[:2] for f in chapter_kernel_files(["03", "04"])} == {"03", "04"}
    assert chapter_kernel_files(None) is None and chapter_kernel_files([]) is None
