"""Load-time forms of a graph for ONNX Runtime's CPU provider: the same numbers, the attention written the way
that runs fastest there.

    folded_attention  the rel-pos term of folded attention as an attention bias (unfold)
    folded_sdpa       a ``tensorrt`` export's MatMul-Softmax-MatMul as ONNX Runtime's MultiHeadAttention
    relpos_kernel     vitdeploy's fused rel-pos attention kernel (a custom-op library) swapped in
    cpu_attention     which of these the ONNX Runtime runner applies to a file, and why
    cpu_form          the form a file written by ``vitdeploy optimize`` holds (its metadata)

Nothing here opens a session: a backend (``runtime.backends``) asks for a form and runs it.
"""
