"""DMA101 and DMA102 on hand-made traces with exact expected numbers."""

from __future__ import annotations

from tests.trace_factory import RankSpec, build
from tracediag.engine.config import Config
from tracediag.engine.diagnose import diagnose
from tracediag.model.findings import Severity

MIB = 1 << 20
BW = 25e9  # bytes/s: the queue's normal bandwidth
NORMAL = int(MIB / BW * 1e9)  # 41943 ns


def _layers(
    spec: RankSpec,
    slow_layer: int | None = None,
    fragmented_layer: int | None = None,
    packets_per_transfer: int = 1,
) -> None:
    """Four layers: trigger on sync -> weight DMA on q0 -> matmul on tensor (no prefetch). The
    fragmented layer's 64 packets serve transfers of ``packets_per_transfer`` packets each
    (their ``transfer`` id, as Neuron's ``packet_aggregation_id``)."""
    t = 0
    prev_mm = None
    for k in range(4):
        trig = spec.add(f"trig{k}", "sync", "compute", t, t + 5)
        if prev_mm is not None:
            spec.dep(prev_mm, trig)
        start = t + 5 + 15  # 15 ns queued after the trigger
        if k == fragmented_layer:
            # 64 packets of 16 KiB at half the bandwidth, 1 us apart (descriptor overhead).
            pkt = int(16384 / (BW / 2) * 1e9)
            last = None
            for i in range(64):
                p = spec.add(
                    "w", "q0", "dma", start, start + pkt, bytes=16384.0, layer=f"layer_{k}",
                    transfer=i // packets_per_transfer,
                )  # fmt: skip
                if i == 0:
                    spec.dep(trig, p, "dma_trigger")
                last = p
                start += pkt + 1000
            end = start - 1000
            dma = last
        else:
            dur = NORMAL * 4 if k == slow_layer else NORMAL
            if k == slow_layer:
                dur = int(MIB / (BW / 4) * 1e9)
            dma = spec.add(
                "w", "q0", "dma", start, start + dur, bytes=float(MIB), layer=f"layer_{k}"
            )
            spec.dep(trig, dma, "dma_trigger")
            end = start + dur
        mm = spec.add(
            "MATMUL", "tensor", "compute", end, end + 20_000, layer=f"layer_{k}", op=f"dot.{k}"
        )
        spec.dep(dma, mm)
        prev_mm = mm
        t = end + 20_000


def _diagnose(**kw):
    specs = []
    for r in (0, 1):
        s = RankSpec(r)
        _layers(s, **kw)
        specs.append(s)
    return diagnose(build(*specs), Config(select=["DMA"]))


def test_dma101_names_the_slow_layer_queue_and_saving():
    d = _diagnose(slow_layer=2)
    slow = [f for f in d.findings if f.code == "DMA101" and f.layer == "layer_2"]
    assert len(slow) == 1
    f = slow[0]
    assert f.severity == Severity.ERROR  # saves more than 10% of the step
    assert f.ranks == (0, 1)  # both ranks' transfer is slow: the fix must reach both
    assert (f.engine, f.track, f.op) == ("tensor", "q0", "dot.2")
    slow_dur = int(MIB / (BW / 4) * 1e9)
    assert f.impact_ns == slow_dur + 15
    assert f.saving_ns == slow_dur - NORMAL  # restored to the queue's typical 25 GB/s
    assert f.end_ns - f.start_ns == slow_dur + 15
    assert abs(f.evidence["typical_bw"] - BW) / BW < 1e-3
    # The other layers' waits are on the path too, but nothing to restore: info only.
    others = [f for f in d.findings if f.code == "DMA101" and f.layer != "layer_2"]
    assert others and all(o.severity == Severity.INFO and o.saving_ns == 0 for o in others)


def test_dma101_clean_stays_below_warning():
    d = _diagnose()
    assert not d.at_or_above(Severity.WARNING)


def test_dma102_fragmented_layer():
    d = _diagnose(fragmented_layer=1)
    frag = [f for f in d.findings if f.code == "DMA102"]
    assert len(frag) == 1
    f = frag[0]
    assert (f.ranks, f.track, f.layer) == ((0, 1), "q0", "layer_1")
    assert f.evidence["transfers"] == 128 and f.evidence["average_bytes"] == 16384
    pkt = int(16384 / (BW / 2) * 1e9)
    before = 64 * pkt + 63 * 1000
    after = 64 * -(-16384 * 10**9 // int(BW))  # each packet at 25 GB/s, no gaps
    assert abs(f.saving_ns - (before - after)) <= 64
    assert f.severity >= Severity.WARNING


def test_dma102_counts_transfers_not_packets():
    """The same 64 packets of 16 KiB as 32 transfers of two: each transfer is 32 KiB, the
    target size, so nothing is small; as transfers of one packet each, DMA102 counts them as
    above (128 over the two ranks)."""
    assert not [f for f in _diagnose(fragmented_layer=1, packets_per_transfer=2).findings
                if f.code == "DMA102"]  # fmt: skip
    (f,) = [f for f in _diagnose(fragmented_layer=1).findings if f.code == "DMA102"]
    assert (f.evidence["transfers"], f.evidence["packets"]) == (128, 128)


def _slow_queue_job(bw: float) -> RankSpec:
    spec = RankSpec(0)
    t, prev = 0, None
    for k in range(4):
        dur = int(4 * MIB / bw * 1e9)
        d = spec.add("w", "q0", "dma", t, t + dur, bytes=float(4 * MIB), layer=f"layer_{k}")
        if prev is not None:
            spec.dep(prev, d)
        mm = spec.add("MATMUL", "tensor", "compute", t + dur, t + dur + 10_000, layer=f"layer_{k}")
        spec.dep(d, mm)
        prev, t = mm, t + dur + 10_000
    return spec


def test_dma103_reports_the_gap_to_the_hardware_peak():
    d = diagnose(build(_slow_queue_job(5e9)), Config(select=["DMA103"]))
    assert len(d.findings) == 1
    f = d.findings[0]
    dur = int(4 * MIB / 5e9 * 1e9)
    at_peak = -(-4 * MIB * 10**9 // int(27e9))  # trn1's 27 GB/s per queue, rounded up
    assert (f.severity, f.track, f.ranks, f.saving_ns) == (Severity.INFO, "q0", (0,), 0)
    assert f.impact_ns == 4 * dur
    assert f.evidence["peak_saving_ns"] == 4 * (dur - at_peak)
    assert abs(f.evidence["achieved_bw"] - 5e9) / 5e9 < 1e-3


def test_dma103_quiet_near_the_peak():
    d = diagnose(build(_slow_queue_job(25e9)), Config(select=["DMA103"]))
    assert d.findings == []


def test_dma101_slow_queue_without_fast_peers_on_it():
    """Each layer loads on its own queue; layer 2's queue is slow on every rank: its peers are
    the other queues, so the what-if restores it to their bandwidth."""
    specs = []
    for r in (0, 1):
        s = RankSpec(r)
        t, prev = 0, None
        for k in range(4):
            dur = int(MIB / (BW / 4) * 1e9) if k == 2 else NORMAL
            trig = s.add(f"trig{k}", "sync", "compute", t, t + 5)
            if prev is not None:
                s.dep(prev, trig)
            d = s.add(
                "w", f"q{k}", "dma", t + 20, t + 20 + dur, bytes=float(MIB), layer=f"layer_{k}"
            )
            s.dep(trig, d, "dma_trigger")
            mm = s.add(
                "MATMUL",
                "tensor",
                "compute",
                t + 20 + dur,
                t + 20 + dur + 20_000,
                layer=f"layer_{k}",
            )
            s.dep(d, mm)
            prev, t = mm, t + 20 + dur + 20_000
        specs.append(s)
    d = diagnose(build(*specs), Config(select=["DMA101"]))
    f = [f for f in d.findings if f.layer == "layer_2"][0]
    assert (f.track, f.ranks, f.severity) == ("q2", (0, 1), Severity.ERROR)
    assert f.saving_ns == int(MIB / (BW / 4) * 1e9) - NORMAL
