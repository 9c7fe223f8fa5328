"""Helpers every model's applications share: which files make a model (``files``), COCO RLE (``rle``), the rules
of prompts (``prompts``)."""
