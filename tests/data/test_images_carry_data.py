"""Every node image carries MNIST and Fashion-MNIST (Debian's dataset-fashion-mnist, installed by
the debootstrap base or by apt on a registry base), converted into the image's cache."""
from __future__ import annotations

import subprocess

import pytest

from commlab.runs.roster import ROLES
from commlab.testbed.engine import bootstrap_as_root
from commlab.testbed.images import build_images, engine_missing, images_current, node_image

CHECK = ("import os; import numpy as np; from commlab.data import data_dir, load_raw; "
         "cached = sorted(os.listdir(data_dir())); "
         "print(cached, *(np.bincount(load_raw(n).train_y).tolist() for n in ('mnist', 'fashion_mnist')), sep=';')")


@pytest.fixture(scope="module")
def images():
    """As the container tests: as root, the engine is installed and started first (else the skip
    names what is missing); the images are built when older than the sources."""
    bootstrap_as_root()
    if (missing := engine_missing()) is not None:
        pytest.skip(missing)
    if not images_current():
        build_images()


@pytest.mark.docker
@pytest.mark.timeout(1200)  # a cold image build when the images are older than the sources
@pytest.mark.parametrize("role", ROLES)
def test_node_images_hold_fashion_mnist(images, role):
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", node_image(role),
                          "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    cached, mnist, fashion = out.stdout.strip().split(";")
    assert cached == str(["fashion_mnist.npz", "mnist.npz"])  # converted when the image was built
    assert fashion == str([6000] * 10) and mnist.startswith("[5923, 6742")
