"""GPUs matched to their names (analysis/devices.py): where the header's `deviceProperties` and
the kernels' device ids disagree (visible-device remapping), one listed and one used are paired
and said to be; otherwise an unlisted GPU's name is unknown. Summary text and JSON, the
viewer's lane labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CORPUS
from kinetoscope.analysis.devices import (
    LISTED,
    PAIRED,
    UNKNOWN,
    UNLISTED,
    listed_devices,
    name_devices,
)
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load, loads

MI300 = "AMD Instinct MI300X"


def test_one_listed_one_used_with_other_ids_are_paired():
    names = name_devices({0: MI300}, [2])
    assert names[2].how == PAIRED and names[2].name == MI300 and names[2].listed_as == 0
    assert names[2].label == f"GPU 2 (listed as device 0: {MI300})"


def test_the_same_id_is_named_as_listed():
    names = name_devices({0: "A", 1: "B"}, [1])
    assert names[1].how == LISTED and names[1].name == "B" and names[1].label == "GPU 1 (B)"


@pytest.mark.parametrize(
    ("listed", "used"),
    [
        ({0: "A", 1: "B"}, [2]),  # two listed, one used elsewhere: which?
        ({0: "A"}, [2, 3]),  # one listed, two used
    ],
)
def test_ambiguous_remaps_leave_names_unknown(listed, used):
    names = name_devices(listed, used)
    for device in used:
        assert names[device].how == UNKNOWN and names[device].name is None
        assert "name unknown" in names[device].label
        assert "the trace lists device" in names[device].label


def test_a_listed_gpu_keeps_its_name_beside_an_unlisted_one():
    names = name_devices({0: "A"}, [0, 5])
    assert names[0].how == LISTED and names[0].name == "A"
    assert (
        names[5].how == UNKNOWN
        and names[5].label == "GPU 5 (name unknown: the trace lists device 0)"
    )


def test_no_header_devices_names_nothing():
    names = name_devices({}, [3])
    assert names[3].how == UNLISTED and names[3].label == "GPU 3" and names[3].name is None


def test_header_entries_that_are_not_devices_are_ignored():
    listed = listed_devices([{"id": "0", "name": "x"}, {"id": 1, "name": "  "}, {"name": "y"}])
    assert listed == {1: None}


def remapped_trace(listed_ids: list[int], kernel_device: int) -> dict:
    events = []
    for i in range(3):
        t = i * 100
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 20,
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t + 2,
                "dur": 5,
                "args": {"correlation": i + 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "Cijk_gemm",
                "pid": kernel_device,
                "tid": 0,
                "ts": t + 10,
                "dur": 30,
                "args": {"correlation": i + 1, "device": kernel_device, "stream": 0},
            },
        ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": i, "name": MI300, "totalGlobalMem": 206141652992} for i in listed_ids
        ],
        "traceEvents": events,
    }


def summary_of(document: dict) -> dict:
    return build_summary(loads(json.dumps(document).encode()))


def test_summary_json_names_the_remapped_gpu():
    gpu = summary_of(remapped_trace([0], 2))["gpu"]
    assert [g["device"] for g in gpu] == [2]
    assert gpu[0]["device_name"] == MI300
    assert gpu[0]["listed_as"] == 0 and gpu[0]["device_naming"] == "paired"


def test_summary_json_same_ids_and_ambiguous_ids():
    same = summary_of(remapped_trace([0], 0))["gpu"][0]
    assert (same["device_name"], same["listed_as"], same["device_naming"]) == (MI300, 0, "listed")
    two = summary_of(remapped_trace([0, 1], 2))["gpu"][0]
    assert (two["device_name"], two["listed_as"], two["device_naming"]) == (None, None, "unknown")


def _text(path: Path, capsys) -> str:
    from kinetoscope.commands.summary import run_summary

    assert run_summary(str(path), width=120) == 0
    return capsys.readouterr().out


def test_summary_text_says_which_gpu(write_trace, capsys):
    out = _text(write_trace(remapped_trace([0], 2)), capsys)
    assert f"GPU 2 (listed as device 0: {MI300})" in " ".join(out.split())
    out = _text(write_trace(remapped_trace([0, 1], 2)), capsys)
    flat = " ".join(out.split())
    assert "GPU 2 (name unknown: the trace lists devices 0, 1)" in flat
    out = _text(write_trace(remapped_trace([0], 0)), capsys)
    flat = " ".join(out.split())
    assert f"GPUs: GPU 0 ({MI300})" in flat and "listed as" not in flat


def test_viewer_lane_labels_name_the_remapped_gpu():
    from kinetoscope.tui.data.viewdata import build_view_data

    data = build_view_data(loads(json.dumps(remapped_trace([0], 2)).encode()))
    labels = [g.label for g in data.groups if g.is_gpu]
    assert labels == [f"GPU 2 · {MI300} (listed as device 0)"]
    data = build_view_data(loads(json.dumps(remapped_trace([0, 1], 2)).encode()))
    labels = [g.label for g in data.groups if g.is_gpu]
    assert labels == ["GPU 2 · name unknown (the trace lists devices 0, 1)"]
    data = build_view_data(loads(json.dumps(remapped_trace([0], 0)).encode()))
    assert [g.label for g in data.groups if g.is_gpu] == [f"GPU 0 · {MI300}"]


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "device", "how", "listed_as"),
    [
        ("mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 2, "paired", 0),
        ("sglang_decode_capture_bs_32_rank0.json.gz", 9, "paired", 0),
        ("mi300_resnet_act_checkpoint.json.gz", 2, "listed", 2),  # eight listed, 2 among them
    ],
)
def test_mi300_corpus_traces(name, device, how, listed_as):
    path = CORPUS / "tracelens" / name
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    gpu = build_summary(load(str(path), write_cache=False))["gpu"]
    assert [g["device"] for g in gpu] == [device]
    assert gpu[0]["device_naming"] == how and gpu[0]["listed_as"] == listed_as
    assert gpu[0]["device_name"].startswith("AMD Instinct MI300X")
