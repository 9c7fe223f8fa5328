"""Packages that live outside vitdeploy/: the recipes (export/) and the bundled calibration images
(calibration/images/) stay at the top of the checkout, where the project's layout keeps them, and are
installed as data-only subpackages, so a wheel carries them (read with importlib.resources), as it carries
vitdeploy/data/runtime_facts.json (the facts Python and the C++ library both read) and the server's page
(vitdeploy/runtime/apps/serving/page/, with onnxruntime-web and swagger-ui-dist in page/ort/ and page/swagger/ once
scripts/fetch_page_assets.py put them there).
Everything else about the build is in pyproject.toml."""

from setuptools import find_packages, setup

DATA_PACKAGES = {"vitdeploy._recipes": "export", "vitdeploy._calibration_images": "calibration/images"}

setup(
    packages=find_packages(include=["vitdeploy", "vitdeploy.*"]) + list(DATA_PACKAGES),
    package_dir=DATA_PACKAGES,
    package_data={"vitdeploy": ["data/*.json", "runtime/apps/serving/page/*", "runtime/apps/serving/page/ort/*", "runtime/apps/serving/page/swagger/*"], "vitdeploy._recipes": ["*.toml"], "vitdeploy._calibration_images": ["*.jpg", "*.png"]},
)
