"""SAM 2 applications: ``Sam2ImagePredictor`` and ``Sam2VideoPredictor`` with the official calls (the memory bank the
video predictor selects from), and the automatic mask generator on SAM 2 files."""
