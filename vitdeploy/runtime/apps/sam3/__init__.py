"""SAM 3 applications: ``Sam3Processor`` with the official calls on the three files of a SAM 3 image model (vision
encoder, text encoder, detector), torch-free."""
