"""Put the server's browser-side packages into vitdeploy/runtime/apps/serving/page/, pinned like a lock.

- onnxruntime-web (page/ort/): the page can run a SAM decoder in the browser, as Meta's demo does. Its WebAssembly
  build is 14 MB, so it is not committed.
- swagger-ui-dist (page/swagger/): what /docs renders the OpenAPI schema with (FastAPI's default loads it from a CDN).

Each pinned release's tarball comes from the npm registry and is checked against the registry's SHA-512 integrity
(a changed file is refused, as pip refuses a changed wheel); the files the server serves are unpacked with the
package's license. A wheel built afterwards carries them (setup.py), so an installed vitdeploy needs no network.
Without them the page decodes on the server only and /docs uses FastAPI's CDN.

    python scripts/fetch_page_assets.py            # idempotent: nothing is fetched when the files are there
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "vitdeploy" / "runtime" / "apps" / "serving" / "page"


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str
    integrity: str  # the registry's dist.integrity of the tarball
    files: tuple[str, ...]  # paths inside the tarball's package/ folder
    folder: str  # under page/

    @property
    def tarball(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.name}-{self.version}.tgz"


PACKAGES = (
    # the WebAssembly CPU build (ort.wasm.min.js, its module and binary) and the WebGPU build (ort.webgpu.min.js, whose
    # asyncify module and binary hold its WebGPU execution provider and WebAssembly's); package.json carries the
    # version and the license (MIT: the npm package ships no LICENSE file)
    NpmPackage("onnxruntime-web", "1.30.0",
               "sha512-q0y+JrrtukXSzsBWEMccVfqX25LRmosXHF+CaRJmg8pZClzcV7svNc4rKY3jL02Vb7QmRMDs1SigqR4CXAfKYQ==",
               ("dist/ort.wasm.min.js", "dist/ort-wasm-simd-threaded.mjs", "dist/ort-wasm-simd-threaded.wasm",
                "dist/ort.webgpu.min.js", "dist/ort-wasm-simd-threaded.asyncify.mjs",
                "dist/ort-wasm-simd-threaded.asyncify.wasm", "package.json"), "ort"),
    NpmPackage("swagger-ui-dist", "5.35.0",
               "sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==",
               ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "LICENSE", "NOTICE"), "swagger"),
)


def fetch(package: NpmPackage) -> int:
    target = PAGE / package.folder
    stamp = target / "VERSION"
    if stamp.is_file() and stamp.read_text().strip() == package.version and \
            all((target / Path(f).name).is_file() for f in package.files):
        return 0
    try:
        with urllib.request.urlopen(package.tarball, timeout=120) as answer:
            data = answer.read()
    except OSError as exc:
        print(f"note: could not fetch {package.name} {package.version} ({exc}): the server's page goes without it",
              file=sys.stderr)
        return 0
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != package.integrity:
        print(f"error: {package.tarball} does not match its pinned integrity ({digest[:30]}... != "
              f"{package.integrity[:30]}...): not installed", file=sys.stderr)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for name in package.files:
            partial = target / (Path(name).name + ".partial")
            partial.write_bytes(archive.extractfile(archive.getmember(f"package/{name}")).read())
            partial.replace(target / Path(name).name)
    stamp.write_text(package.version + "\n")
    print(f"{package.name} {package.version} -> {target.relative_to(PAGE.parents[4])}", file=sys.stderr)
    return 0


def main() -> int:
    return max(fetch(package) for package in PACKAGES)


if __name__ == "__main__":
    sys.exit(main())
