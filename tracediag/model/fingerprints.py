"""Stable identities of findings: the same problem gets the same fingerprint in every run.

A fingerprint hashes what names the problem (rule code, ranks, track, layer, operator) and
never what moves from run to run (times, durations, savings, severity, message figures).
Two findings of one report with equal identities are told apart by their order of appearance.
"""

from __future__ import annotations

import hashlib

import orjson

#: Version of the identity recipe; SARIF writes it as the partialFingerprints key.
FINGERPRINT_VERSION = "tracediag/v1"


#: Rules whose ``layer`` and ``track`` name the cause found this run (COL201: what the late rank
#: does longer than the others and where, "idle before DistributedDataParallel.forward"), not
#: where the problem is: left out of the identity, so one straggler is one finding run to run.
CAUSE_LAYER_CODES = frozenset({"COL201"})


def identity(finding: dict) -> list:
    """The fields a fingerprint hashes; layer lists are order-insensitive (``"a, b"`` = ``"b, a"``)."""
    cause = finding["code"] in CAUSE_LAYER_CODES
    layer = "" if cause else str(finding.get("layer", ""))
    layers = sorted(p.strip() for p in layer.split(",") if p.strip())
    return [
        finding["code"],
        sorted(int(r) for r in finding.get("ranks", [])),
        "" if cause else str(finding.get("track", "")),
        ", ".join(layers),
        str(finding.get("op", "")),
    ]


def fingerprints(findings: list[dict]) -> list[str]:
    """One fingerprint per finding (32 hex digits), ``:N`` appended to the Nth repeat."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        digest = hashlib.sha256(orjson.dumps(identity(f))).hexdigest()[:32]
        n = seen.get(digest, 0) + 1
        seen[digest] = n
        out.append(digest if n == 1 else f"{digest}:{n}")
    return out
