"""Recorded inputs (the calibration data of a graph that takes other graphs' outputs): spread evenly over a run of any
length, saved and read back exactly without pickles, and refused for a graph whose inputs they are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from vitdeploy.errors import InputError
from vitdeploy.runtime.processing.recorded_inputs import InputRecorder, load_recorded_inputs


@pytest.mark.parametrize("calls", [5, 16, 17, 58, 1000])
def test_samples_are_spread_evenly_over_the_calls(calls: int) -> None:
    recorder = InputRecorder(limit=16)
    for k in range(calls):
        recorder({"x": np.array([k])})
    kept = [int(s["x"][0]) for s in recorder.samples]
    steps = set(np.diff(kept).tolist())
    assert kept[0] == 0 and len(steps) <= 1 and len(kept) <= 16 and recorder.calls == calls
    assert len(kept) >= min(calls, 8)  # never thinned below half the limit


def test_round_trip_and_garbage(tmp_path: Path) -> None:
    recorder = InputRecorder(limit=4)
    rng = np.random.default_rng(0)
    for _ in range(3):
        recorder({"a": rng.standard_normal((1, 3, 2)).astype(np.float32), "b": np.array([[1, 2]], np.int64)})
    path = recorder.save(tmp_path / "rec.npz", {"graph": "memory_attention"})
    samples, meta = load_recorded_inputs(path)
    assert meta == {"graph": "memory_attention", "calls_seen": 3, "samples": 3}
    for got, want in zip(samples, recorder.samples):
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) and got[k].dtype == want[k].dtype
                                                 for k in got)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="is not a recorded-inputs file"):
        load_recorded_inputs(tmp_path / "junk.npz")
    np.savez(tmp_path / "bad_meta.npz", **{"0000/a": np.zeros(2), "__meta__": np.frombuffer(b"\xff{", np.uint8)})
    with pytest.raises(InputError, match="damaged __meta__ entry"):
        load_recorded_inputs(tmp_path / "bad_meta.npz")
    with pytest.raises(InputError, match="no recorded inputs at"):
        load_recorded_inputs(tmp_path / "missing.npz")
    with pytest.raises(InputError, match="never run"):
        InputRecorder().save(tmp_path / "empty.npz")


def test_calibration_refuses_inputs_of_another_graph(tmp_path: Path) -> None:
    from vitdeploy.precision.calibration_data import load_recorded_input_set

    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2])])
    model = helper.make_model(graph)
    recorder = InputRecorder()
    recorder({"a": np.ones((1, 3, 2), np.float64)})
    recorder({"a": np.zeros((1, 3, 2), np.float64)})
    good = load_recorded_input_set(recorder.save(tmp_path / "good.npz", {"graph": "g"}), model)
    assert len(good) == 2 and good.feeds()[0]["a"].dtype == np.float32  # cast to the graph's element type
    other = InputRecorder()
    for _ in range(2):
        other({"memory": np.ones((1, 3, 2), np.float32)})
    with pytest.raises(InputError, match=r"recorded for inputs \['memory'\], but the model takes \['a'\]"):
        load_recorded_input_set(other.save(tmp_path / "other.npz", {"graph": "memory_attention"}), model)
