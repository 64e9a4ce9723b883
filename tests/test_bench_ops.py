"""`workbench bench ops`: op cases timed beside ONNX Runtime and OpenVINO, checked against ONNX Runtime, written as
a results page with GB/s for every op and GFLOP/s where it multiplies."""

import pytest

from workbench.bench.ops import CASES, bytes_moved, layout_share
from workbench.cli import main

pytest.importorskip("openvino", reason="OpenVINO is an optional extra: pip install -e '.[openvino]'")


def test_the_page_has_every_peer_and_a_row_per_case(tmp_path):
    assert main(["bench", "ops", "--only", "call_overhead", "fc_batch1", "depthwise3x3", "--repeat", "2", "--rounds",
                 "1", "--out", str(tmp_path)]) == 0
    (page,) = tmp_path.glob("ops_*.md")
    text = page.read_text()
    assert "| workbench ms | ort_all ms | openvino ms | fastest peer/workbench |" in text
    cores = next(line for line in text.splitlines() if line.startswith("- cores: "))  # how whole the cores were
    start, end = (float(cores.split(f"× ({when})")[0].rsplit(" ", 1)[1]) for when in ("start", "end"))
    assert start >= 0.5 and end >= 0.5
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith(("| call_overhead", "| fc_batch1", "| depthwise3x3"))}
    assert set(rows) == {"call_overhead", "fc_batch1", "depthwise3x3"}
    for cells in rows.values():
        assert cells[-1].strip(" |") == "ok" and float(cells[3]) > 0 and float(cells[4]) > 0 and float(cells[5]) > 0
    fc = next(case for case in CASES if case.name == "fc_batch1")
    assert bytes_moved(fc.model(), fc.x) == 4 * (9216 + 4096 * 9216 + 4096 + 4096)  # input, weights, bias, output
    assert float(rows["fc_batch1"][9]) > 0  # the workbench's GB/s

    # where the workbench's time goes: the NCHW one-node model's depthwise conv between the layout changes
    kernels = rows["depthwise3x3"][-3]
    assert "dwconv2d_nhwc_f32_packed" in kernels and "transpose" in kernels
    shares = [int(part.rsplit(" ", 1)[1].rstrip("%")) for part in kernels.split(", ")]
    assert len(shares) == 3 and 50 <= sum(shares) <= 101 and shares == sorted(shares, reverse=True)
    # and the peer's time over the workbench's without them: larger than the plain ratio, the layout share stated
    ratio, layout = rows["depthwise3x3"][-2].split(" (")
    assert float(ratio) > float(rows["depthwise3x3"][6]) and 0 < int(layout.split("%")[0]) < 100
    assert rows["fc_batch1"][-2] == "—"  # no layout change around a fully connected layer


def test_layout_share_counts_the_kernels_that_only_change_the_layout():
    shares = [("fused_transpose_pad", 0.4), ("fused_dwconv2d_nhwc_f32_packed_add", 0.25), ("transpose1", 0.2),
              ("fused_concatenate_add_transpose", 0.1), ("fused_reshape3_add7", 0.05)]
    assert layout_share(shares) == pytest.approx(0.6)  # the concatenation is a grouped conv's own work
