"""Load-time forms of a graph for the CPU runtimes: the same numbers, written the way that runs fastest (or, for
OpenVINO's heads transposes, right) there.

    folded_attention  the rel-pos term of folded attention as an attention bias (unfold)
    folded_sdpa       a ``tensorrt`` export's MatMul-Softmax-MatMul as ONNX Runtime's MultiHeadAttention
    relpos_kernel     vitdeploy's fused rel-pos attention kernel (a custom-op library) swapped in
    cpu_attention     which of these the ONNX Runtime runner applies to a file, and why
    cpu_form          the form a file written by ``vitdeploy optimize`` holds (its metadata)
    openvino_gelu     OpenVINO: each GELU kept apart from its GEMM where that GEMM is MLAS
    openvino_heads    OpenVINO: a heads transpose whose tokens may equal its heads written in 5-D (its fused
                      attention misread the 4-D one)

Nothing here opens a session: a backend (``runtime.backends``) asks for a form and runs it.
"""
