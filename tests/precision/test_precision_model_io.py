"""Models past protobuf's 2 GiB: sessions with weights beside the graph give the same outputs; sizes without ByteSize."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from vitdeploy.precision import model_io


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    big = numpy_helper.from_array(rng.standard_normal((64, 512)).astype(np.float32), "W")  # 128 KiB: travels beside
    small = numpy_helper.from_array(rng.standard_normal((512,)).astype(np.float32), "b")  # 2 KiB: stays inline
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 512])], [big, small])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)  # ORT 1.31 reads <= 13


def test_weights_beside_the_graph_give_the_same_outputs():
    model = _model()
    data, names, arrays = model_io.graph_and_weights(model)
    assert names == ["W"] and len(data) < 4096  # the graph travels without its large weight
    np.testing.assert_array_equal(arrays[0], numpy_helper.to_array(model.graph.initializer[0]))
    x = {"x": np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)}
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    beside = model_io.inference_session(model, ort.SessionOptions()).run(None, x)[0]
    np.testing.assert_array_equal(plain, beside)
    assert model.graph.initializer[0].raw_data  # the caller's model keeps its weights


def test_sizes_come_from_shapes_and_external_weights_do_not_count():
    model = _model()
    assert model_io.inline_weight_bytes(model) == 64 * 512 * 4 + 512 * 4
    assert not model_io.is_large(model)
    model.graph.initializer[0].data_location = TensorProto.EXTERNAL
    assert model_io.inline_weight_bytes(model) == 512 * 4


def test_large_models_are_saved_as_onnx_plus_data_atomically(tmp_path, monkeypatch):
    model = _model()
    monkeypatch.setattr(model_io, "SINGLE_MESSAGE_MAX_BYTES", 1000)
    written = model_io.save_onnx_atomic(model, tmp_path / "m.onnx")
    assert [p.name for p in written] == ["m.onnx", "m.onnx.data"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]  # no staging left
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]),
                                  numpy_helper.to_array(model.graph.initializer[0]))
    assert model.graph.initializer[0].raw_data  # saving did not strip the caller's model
