"""Build the node images: one shared base (library + dependencies), then controller/client/worker.

The base starts from python:3.11-slim when a registry answers. When none does (CI, offline
machines) a Debian bookworm root filesystem is made with debootstrap from the machine's own apt
mirror, imported with `docker import`. Python packages come from a wheelhouse that `pip wheel`
fills on the host (pip's own configuration decides where from; source-only packages are built
here), the only source of packages on debootstrap bases, the first on python:3.11-slim. Both caches live
outside git: the wheelhouse in images/wheelhouse/, the rootfs tarball in .cache/images/.

    python -m commlab.testbed.images [--base IMAGE]
"""
from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from ..runs.roster import ROLES
from .engine import FIX, REPO, EngineError, compose_missing, docker, engine_answers, image_exists

REGISTRY_BASE = "python:3.11-slim"
BASE_IMAGE = "commlab-base:latest"
WHEELHOUSE = REPO / "images" / "wheelhouse"
CACHE = REPO / ".cache" / "images"
SUITE = "bookworm"  # its python3 is 3.11, so the host's cp311 wheels fit
# dataset-fashion-mnist: the Fashion-MNIST files every node image carries (commlab.data.fashion_mnist).
DEBOOTSTRAP_PACKAGES = "python3,python3-venv,python3-pip,iproute2,ca-certificates,dataset-fashion-mnist"
# Named after the package list: a root filesystem made with another list is not taken for this one.
ROOTFS_TAG = f"{SUITE}-{hashlib.sha256(DEBOOTSTRAP_PACKAGES.encode()).hexdigest()[:8]}"
ROOTFS_IMAGE = f"commlab-rootfs:{ROOTFS_TAG}"
# Installed besides pyproject's dependencies: the build backend, for installs without an index.
BUILD_REQUIREMENTS = ("setuptools>=61", "wheel")


SOURCES = ("pyproject.toml", "shared/commlab", "nodes", "netem", "images")
SOURCE_LABEL = "commlab.source"


def source_digest() -> str:
    """Hash of everything the images are built from, stored as a label: a stale image is rebuilt."""
    h = hashlib.sha256()
    for top in SOURCES:
        root = REPO / top
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                     and "__pycache__" not in p.parts and "wheelhouse" not in p.parts)
        for path in files:
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def node_image(role: str) -> str:
    return f"commlab-{role}:latest"


def log(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def runtime_requirements() -> list[str]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt already uses for `suite` (never hard-coded here)."""
    sources = sorted(Path("/etc/apt").glob("sources.list.d/*.sources")) + \
        [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt").glob("sources.list.d/*.list"))
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split() \
                        and "main" in fields.get("Components", "").split():
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+.*\bmain\b", line)
                if m and m.group(2) == suite:
                    return m.group(1)
    raise RuntimeError(f"no apt source for Debian {suite} main found in /etc/apt: cannot debootstrap")


def registry_answers(image: str = REGISTRY_BASE) -> bool:
    if image_exists(image):
        return True
    log(f"pulling {image} ...")
    try:
        out = docker("pull", "-q", image, check=False, timeout_s=120)
    except subprocess.TimeoutExpired:
        return False
    if out.returncode != 0:
        log(f"no registry answers ({out.stderr.decode(errors='replace').strip().splitlines()[-1:]}): "
            "making the base with debootstrap")
    return out.returncode == 0


def base_source_missing() -> str | None:
    """None when the base image can be made here (already made, debootstrap, or a registry), else
    one line naming what is missing and the command that provides it."""
    if image_exists(ROOTFS_IMAGE) or (CACHE / f"{ROOTFS_TAG}-rootfs.tar").exists() or shutil.which("debootstrap") \
            or registry_answers():
        return None
    return "no registry answers and debootstrap is missing: run `sudo make docker-engine` (or apt-get install debootstrap)"


def engine_missing() -> str | None:
    """None when containers can run here: a docker CLI, an engine, compose v2 and a way to make
    the base image (a registry or debootstrap); else one line naming what is missing and the fix."""
    ok, why = engine_answers()
    if not ok and "permission denied" in why:  # an engine runs, this user may not use it
        return "the Docker engine refuses this user (permission denied): run as root or join the docker group"
    if not ok:
        return f"no Docker engine answers ({why}): run `{FIX}`"
    return compose_missing() or base_source_missing()


def remove_rootfs(rootfs: Path) -> None:
    """Delete a rootfs left by an interrupted debootstrap, unmounting its /proc etc. first:
    deleting through a live mount would reach the host's own files."""
    root = str(rootfs.resolve())
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m == root or m.startswith(root + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=True)
    shutil.rmtree(rootfs, ignore_errors=True)


def build_rootfs_image() -> str:
    """Import a debootstrapped Debian as ROOTFS_IMAGE (the tarball is cached in .cache/images)."""
    if image_exists(ROOTFS_IMAGE):
        return ROOTFS_IMAGE
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{ROOTFS_TAG}-rootfs.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None:
            raise RuntimeError("no registry answers and debootstrap is missing: apt-get install debootstrap")
        rootfs = CACHE / f"{ROOTFS_TAG}-rootfs"
        remove_rootfs(rootfs)
        mirror = apt_mirror()
        log(f"debootstrap {SUITE} from {mirror} (about a minute)")
        t0 = time.monotonic()
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={DEBOOTSTRAP_PACKAGES}",
                        SUITE, str(rootfs), mirror], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        tmp = tarball.with_suffix(".tmp")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tmp), "."], check=True)
        tmp.replace(tarball)
        remove_rootfs(rootfs)
        log(f"debootstrap done in {time.monotonic() - t0:.0f} s")
    with open(tarball, "rb") as f:
        subprocess.run(["docker", "import", "-", ROOTFS_IMAGE], stdin=f, check=True, stdout=subprocess.DEVNULL)
    return ROOTFS_IMAGE


def fill_wheelhouse(requirements: list[str]) -> None:
    """A wheel of every requirement (and dependency) in images/wheelhouse, once per list: downloaded,
    or built here for those published as source only (pyaegis), so images need no compiler."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    stamp = WHEELHOUSE / ".requirements"
    wanted = "\n".join(sorted(requirements))
    if stamp.exists() and stamp.read_text() == wanted:
        return
    log(f"pip wheel into {WHEELHOUSE.relative_to(REPO)}")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--prefer-binary",
                          "-w", str(WHEELHOUSE), *requirements], capture_output=True, text=True)
    if out.returncode != 0:  # pip's warnings about unused index locations are noise otherwise
        raise RuntimeError(f"pip wheel failed:\n{out.stderr[-3000:]}")
    stamp.write_text(wanted)


def docker_build(dockerfile: Path, tag: str, build_args: dict[str, str], label: str = "") -> None:
    args = ["build", "-q", "-f", str(dockerfile), "-t", tag] + (["--label", label] if label else [])
    for k, v in build_args.items():
        args += ["--build-arg", f"{k}={v}"]
    t0 = time.monotonic()
    docker(*args, str(REPO))
    log(f"built {tag} in {time.monotonic() - t0:.0f} s")


def build_images(base: str | None = None) -> dict[str, str]:
    """Build the base and the three node images; returns role -> image name."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)  # the Dockerfile copies it, empty or not
    label = f"{SOURCE_LABEL}={source_digest()}"  # before building: edits made meanwhile count as newer
    if base is None:
        base = REGISTRY_BASE if registry_answers() else None
    # The wheelhouse either way: python:3.11-slim has no compiler for the source-only requirements.
    fill_wheelhouse(runtime_requirements() + list(BUILD_REQUIREMENTS))
    build_args = {"PIP_ARGS": "--find-links /wheels"}
    if base is None:
        base = build_rootfs_image()
        build_args["PIP_ARGS"] = "--no-index --find-links /wheels"
    build_args["BASE"] = base
    docker_build(REPO / "images/base/Dockerfile", BASE_IMAGE, build_args)
    images = {}
    for role in ROLES:
        docker_build(REPO / "images" / role / "Dockerfile", node_image(role), {"BASE_IMAGE": BASE_IMAGE}, label)
        images[role] = node_image(role)
    return images


def images_current() -> bool:
    """Every node image exists and was built from the sources as they are now."""
    want = source_digest()
    for role in ROLES:
        out = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{SOURCE_LABEL}"}}}}',
                     node_image(role), check=False)
        if out.returncode != 0 or out.stdout.decode().strip() != want:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="base image to start from (default: python:3.11-slim if a "
                                       "registry answers, else a debootstrap import)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        images = build_images(args.base)
    except (EngineError, RuntimeError, subprocess.CalledProcessError) as e:
        log(f"FAILED: {e}")
        return 1
    log(f"{', '.join(images.values())} ready in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
