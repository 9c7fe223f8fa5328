"""SAM 1 applications: the official ``SamPredictor`` and ``SamAutomaticMaskGenerator`` calls on deployed files, and saved
embeddings."""
