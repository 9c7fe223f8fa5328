"""Runtime backends: one runner per runtime behind one contract.

    base                  the ``Runner`` contract and the ``RunnerOptions`` every runner takes
    registry              the runtimes (``RUNTIMES``): the files each opens, its runner, how to install it
    onnxruntime_runner    ONNX Runtime (the embedded default), with ort_settings (session options),
                          providers (which execution providers a graph may use) and ort_fusions (what it fused)
    openvino_runner       OpenVINO's CPU plugin
    tensorrt_runner       TensorRT engines (classic or TensorRT for RTX) on CUDA

Which runner a file gets, with which settings, and opening it: the deployment wing above (``runtime.deploy``).
"""
