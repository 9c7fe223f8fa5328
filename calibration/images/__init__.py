"""The bundled calibration images (made by calibration/generate.py, listed in calibration/MANIFEST.json),
installed as the data package ``vitdeploy._calibration_images`` so a wheel carries them (see setup.py)."""
