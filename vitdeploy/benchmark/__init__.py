"""One latency/throughput harness for eager PyTorch, ONNX Runtime and TensorRT.

    contenders  what runs: a Runner plus backend, precision, device and the batch sizes it accepts
    autocast    eager PyTorch under torch.autocast (FP16 / BF16), the eager reference for mixed precision
    harness     warm-up, N timed runs per contender and batch (vitdeploy.validation.latency), throughput
    report      environment (device, threads, versions), the table and the JSON

Times are host-to-host: inputs copied in, outputs copied back, each run synchronized (CUDA stream or
device synchronization on a GPU), so every backend is timed for the same work an application sees.
"""
