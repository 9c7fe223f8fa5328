"""Applications on the runtime backends, with the official APIs' calls and meanings: SAM's ``SamPredictor``
and ``SamAutomaticMaskGenerator`` (with its ``amg`` helpers), ``predict`` over many images, saved embeddings
and mask overlays. A new application (SAM 2's predictors, dataset jobs, a server) is a module here.
"""
