"""Stage 4: precision passes on ONNX graphs: FP16 mixed precision and explicit INT8 (Q/DQ).

TensorRT 11 builds only strongly typed networks, so every precision decision lives in the ONNX graph
and is measured here with ONNX Runtime on a CPU. The passes take an ONNX ``ModelProto`` and
calibration feeds (``{input name: array}`` dicts), so they work for any FP32 graph vitdeploy
exports: the SAM image encoder, the SAM mask decoder and timm ViTs.

    calibration_data  folder of images -> model inputs through the model's own preprocessing
    segments          runs a graph as a few sessions that show every tensor, in bounded memory
    activation_stats  per-node ranges and local FP16 drift over calibration images (FP16 islands)
    range_collection  INT8 activation ranges (minmax, percentile, entropy), streamed
    islands           structural FP32 islands (normalization written out, softmax)
    fp16              FP16 graph with FP32 islands (onnxconverter-common does the rewrite)
    int8              explicit symmetric INT8 Q/DQ (ONNX Runtime quantize_static does the rewrite)
    sensitivity       per-layer INT8 sensitivity and the accuracy-budget search
    checks            TensorRT-readiness checks of converted graphs
    report            what a pass did, for people and for JSON
"""
