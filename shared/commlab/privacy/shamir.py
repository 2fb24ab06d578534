"""Shamir secret sharing of 32-byte secrets over the prime field of 2**521 - 1 (a Mersenne
prime, larger than every secret): any `threshold` shares give the secret back, fewer give nothing."""
from __future__ import annotations

from collections.abc import Callable

PRIME = (1 << 521) - 1
SECRET_BYTES = 32
SHARE_BYTES = 66  # an element of the field


def split(secret: bytes, threshold: int, xs: list[int], entropy: Callable[[int], bytes]) -> dict[int, int]:
    """Shares f(x) for every x in `xs` of a random polynomial f of degree threshold - 1 with f(0) = secret."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a secret is {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= len(xs) or len(set(xs)) != len(xs) or not all(0 < x < PRIME for x in xs):
        raise ValueError(f"need 1 <= threshold <= {len(xs)} distinct non-zero points, got threshold {threshold}")
    coefficients = [int.from_bytes(secret, "big")]
    coefficients += [int.from_bytes(entropy(SHARE_BYTES), "big") % PRIME for _ in range(threshold - 1)]
    shares = {}
    for x in xs:
        y = 0
        for c in reversed(coefficients):
            y = (y * x + c) % PRIME
        shares[x] = y
    return shares


def combine(shares: dict[int, int], threshold: int) -> bytes:
    """The secret from at least `threshold` shares (Lagrange interpolation at 0)."""
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares, the secret needs {threshold}")
    points = sorted(shares.items())[:threshold]
    if not all(0 < x < PRIME and 0 <= y < PRIME for x, y in points):
        raise ValueError("a share lies outside the field")
    secret = 0
    for i, (xi, yi) in enumerate(points):
        num = den = 1
        for j, (xj, _) in enumerate(points):
            if i != j:
                num, den = num * xj % PRIME, den * (xj - xi) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    if secret >> (8 * SECRET_BYTES):
        raise ValueError("the shares do not belong to one secret")
    return secret.to_bytes(SECRET_BYTES, "big")
