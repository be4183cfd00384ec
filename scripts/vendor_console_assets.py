"""Re-download the console's vendored front-end assets from the npm registry and check them
against services/console/src/nexus_console/static/vendor/vendor.json
(`python -m scripts.vendor_console_assets [--write]`).

For a maintainer upgrading an asset: edit its ``version`` and ``tarball`` in vendor.json, run
with ``--write`` (copies the file and its licence out of the tarball, records the new
sha256 and tarball integrity), review the diff, run tests/licences. Without ``--write`` it
only checks: the tarball matches the recorded integrity and the file on disk matches both
the tarball's and the recorded sha256. Never run by the tests (they check the files offline).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

from pydantic import BaseModel, ConfigDict

VENDOR_DIR = (
    Path(__file__).resolve().parent.parent / "services/console/src/nexus_console/static/vendor"
)
MANIFEST = VENDOR_DIR / "vendor.json"
REGISTRY = "https://registry.npmjs.org/"
DOWNLOAD_TIMEOUT = 60.0


class VendoredAsset(BaseModel):
    """One vendored file: where it comes from, its licence and its digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    version: str
    tarball: str
    integrity: str  # the registry's dist.integrity of the tarball (sha512, base64)
    source: str  # the file's path inside the tarball
    file: str  # its name in the vendor directory
    sha256: str
    licence: str  # SPDX identifier
    licence_source: str
    licence_file: str
    note: str = ""


class VendorManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    assets: list[VendoredAsset]


def load_manifest(path: Path = MANIFEST) -> VendorManifest:
    return VendorManifest.model_validate_json(path.read_text())


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npm_integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def download(url: str) -> bytes:
    if not url.startswith(REGISTRY):
        raise ValueError(f"{url}: only the npm registry ({REGISTRY}) is a source")
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:  # noqa: S310
        body: bytes = response.read()
    return body


def member(tarball: bytes, path: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        extracted = archive.extractfile(path)
        if extracted is None:
            raise ValueError(f"{path} is not a file in the tarball")
        return extracted.read()


# Licences the project takes for vendored front-end code (SPDX): permissive, no notice duty
# beyond keeping the licence text beside the file.
PERMISSIVE = frozenset({"0BSD", "MIT", "ISC", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0"})


def offline_problems(manifest: VendorManifest, vendor_dir: Path = VENDOR_DIR) -> list[str]:
    """What is wrong with the vendored files as they are on disk (the tests' check, no network)."""
    problems: list[str] = []
    listed = {name for a in manifest.assets for name in (a.file, a.licence_file)}
    for path in sorted(vendor_dir.iterdir()):
        if path.name != MANIFEST.name and path.name not in listed:
            problems.append(f"{path.name}: in the vendor directory but not in vendor.json")
    for asset in manifest.assets:
        expected_tarball = f"{REGISTRY}{asset.package}/-/{asset.package.rsplit('/', 1)[-1]}-"
        if asset.tarball != f"{expected_tarball}{asset.version}.tgz":
            problems.append(f"{asset.file}: tarball {asset.tarball} is not {asset.package}'s")
        if asset.licence not in PERMISSIVE:
            problems.append(f"{asset.file}: licence {asset.licence} is not a permissive one")
        content = vendor_dir / asset.file
        if not content.is_file():
            problems.append(f"{asset.file}: missing")
        elif sha256_hex(content.read_bytes()) != asset.sha256:
            problems.append(f"{asset.file}: sha256 differs from vendor.json")
        licence = vendor_dir / asset.licence_file
        if not licence.is_file() or len(licence.read_bytes().strip()) < 100:
            problems.append(f"{asset.licence_file}: the licence text is missing")
    return problems


def refresh(asset: VendoredAsset, *, write: bool) -> tuple[VendoredAsset, list[str]]:
    """Download one asset's tarball; return the asset as it should be recorded and the problems."""
    tarball = download(asset.tarball)
    problems: list[str] = []
    integrity = npm_integrity(tarball)
    if not write and integrity != asset.integrity:
        problems.append(f"{asset.package}@{asset.version}: tarball integrity differs")
    content = member(tarball, asset.source)
    licence_text = member(tarball, asset.licence_source)
    digest = sha256_hex(content)
    if write:
        (VENDOR_DIR / asset.file).write_bytes(content)
        (VENDOR_DIR / asset.licence_file).write_bytes(licence_text)
        return asset.model_copy(update={"sha256": digest, "integrity": integrity}), problems
    if digest != asset.sha256:
        problems.append(f"{asset.file}: the registry's {asset.source} is not the recorded sha256")
    on_disk = VENDOR_DIR / asset.file
    if not on_disk.exists() or sha256_hex(on_disk.read_bytes()) != digest:
        problems.append(f"{asset.file}: the vendored file differs from the registry's")
    return asset, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="copy files, record digests")
    args = parser.parse_args(argv)
    manifest = load_manifest()
    assets: list[VendoredAsset] = []
    problems: list[str] = []
    for asset in manifest.assets:
        recorded, found = refresh(asset, write=args.write)
        assets.append(recorded)
        problems.extend(found)
        print(f"{recorded.package}@{recorded.version}: {recorded.file} {recorded.sha256}")
    if args.write:
        updated = VendorManifest(assets=assets).model_dump(exclude_defaults=True)
        MANIFEST.write_text(json.dumps(updated, indent=2) + "\n")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
