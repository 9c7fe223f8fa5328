"""The verb libraries that work on any model: prompted masks over many images (``predict``), objects tracked through
a video and what ``track`` writes, and mask overlays for people."""
