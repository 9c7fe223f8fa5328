"""Applications on the runtime backends, with the official APIs' calls and meanings, in rooms by what they serve:

    sam        SAM 1: ``SamPredictor``, ``SamAutomaticMaskGenerator`` (its ``amg`` helpers), saved embeddings
    sam2       SAM 2: ``Sam2ImagePredictor``, ``Sam2VideoPredictor`` (its memory bank), the mask generator
    verbs      the verb libraries that work on any model: ``predict`` over many images, ``track``'s run and
               writer, mask overlays
    datasets   the dataset jobs (``embed``, ``segment-all --images``): listing and planning, the output
               folder, Ray Data
    serving    the prompt service and its servers (one process, Ray Serve)

``predictors`` picks the predictor for a pair of files. A new model's predictors are a package here (``sam3``).
"""
