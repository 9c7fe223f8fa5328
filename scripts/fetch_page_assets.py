"""Put onnxruntime-web into the server's page (vitdeploy/runtime/apps/serving/page/ort/), pinned like a lock.

The page can run a SAM decoder in the browser, as Meta's demo does, with onnxruntime-web from npm. Its WebAssembly
build is 14 MB, so it is not committed: this takes the pinned release's tarball from the npm registry, checks it
against the registry's SHA-512 integrity (a changed file is refused, as pip refuses a changed wheel), and unpacks
the three files the page loads, with the package's package.json (version, MIT license). A wheel built afterwards
carries them (setup.py), so an installed vitdeploy needs no network. Without them the page decodes on the server only and says so.

    python scripts/fetch_page_assets.py            # idempotent: nothing is fetched when the files are there
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "1.30.0"
TARBALL = f"https://registry.npmjs.org/onnxruntime-web/-/onnxruntime-web-{VERSION}.tgz"
INTEGRITY = "sha512-q0y+JrrtukXSzsBWEMccVfqX25LRmosXHF+CaRJmg8pZClzcV7svNc4rKY3jL02Vb7QmRMDs1SigqR4CXAfKYQ=="
#: What the page loads (the WebAssembly CPU build: ort.wasm.min.js and its module and binary), and package.json
#: (its version and license, MIT; the npm package ships no LICENSE file).
FILES = ("dist/ort.wasm.min.js", "dist/ort-wasm-simd-threaded.mjs", "dist/ort-wasm-simd-threaded.wasm", "package.json")
TARGET = Path(__file__).resolve().parents[1] / "vitdeploy" / "runtime" / "apps" / "serving" / "page" / "ort"


def main() -> int:
    stamp = TARGET / "VERSION"
    if stamp.is_file() and stamp.read_text().strip() == VERSION and all((TARGET / Path(f).name).is_file() for f in FILES):
        return 0
    try:
        with urllib.request.urlopen(TARBALL, timeout=120) as answer:
            data = answer.read()
    except OSError as exc:
        print(f"note: could not fetch onnxruntime-web {VERSION} ({exc}): the page will decode on the server only",
              file=sys.stderr)
        return 0
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != INTEGRITY:
        print(f"error: {TARBALL} does not match its pinned integrity ({digest[:30]}... != {INTEGRITY[:30]}...): "
              "not installed", file=sys.stderr)
        return 1
    TARGET.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for name in FILES:
            member = archive.getmember(f"package/{name}")
            partial = TARGET / (Path(name).name + ".partial")
            partial.write_bytes(archive.extractfile(member).read())
            partial.replace(TARGET / Path(name).name)
    stamp.write_text(VERSION + "\n")
    print(f"onnxruntime-web {VERSION} -> {TARGET.relative_to(TARGET.parents[5])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
