"""Images in, arrays out, shared by the applications, ``validate`` and ``calibrate``: reading images, the
models' own preprocessing (SAM's resize-longest-side, timm's data config), mask post-processing, and
the seeded input sets the checks run on. NumPy and Pillow only.
"""
