"""Self-tests of the clean-room XPlane fixture writer (the writer only; no tracediag import).

The files are read back with a tiny protobuf decoder of this test's own (no generated classes),
and what it finds is compared with the truth the writer computed from its simulation.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.cleanroom import xplane_writer as xw

REQUIRED = {"clean", "straggler_device", "host_bound", "tpu", "two_hosts"}
COLL_WORDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute")


# --------------------------------------------------------------------------- tiny decoder
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, wire, value))
    return out


def _stat(buf):
    sid, value = None, None
    for f, _w, v in _fields(buf):
        if f == 1:
            sid = v
        elif f == 2:
            value = struct.unpack("<d", v)[0]
        elif f == 3:
            value = v
        elif f == 4:
            value = _signed(v)
        elif f == 5:
            value = v.decode()
        elif f == 7:
            value = ("ref", v)
    return sid, value


def _plane(buf):
    p = {"lines": [], "emd": {}, "smd": {}, "raw_stats": [], "unknown": 0, "refs": 0}
    raw_emd = []
    for f, _w, v in _fields(buf):
        if f == 1:
            p["id"] = v
        elif f == 2:
            p["name"] = v.decode()
        elif f == 3:
            p["lines"].append(v)
        elif f in (4, 5):
            entry = dict((ff, vv) for ff, _, vv in _fields(v))
            if f == 5:
                name = next((vv.decode() for ff, _, vv in _fields(entry[2]) if ff == 2), "")
                p["smd"][entry[1]] = name
            else:
                raw_emd.append((entry[1], entry[2]))
        elif f == 6:
            p["raw_stats"].append(v)
        else:
            p["unknown"] += 1

    def stats(raws):
        out = {}
        for raw in raws:
            sid, value = _stat(raw)
            if isinstance(value, tuple):
                p["refs"] += 1
                value = p["smd"][value[1]]
            out[p["smd"][sid]] = value
        return out

    for key, val in raw_emd:
        md = {"name": "", "display": None, "stats": [], "children": [], "packed": False}
        for ff, ww, vv in _fields(val):
            if ff == 2:
                md["name"] = vv.decode()
            elif ff == 4:
                md["display"] = vv.decode()
            elif ff == 5:
                md["stats"].append(vv)
            elif ff == 6 and ww == 2:
                md["packed"] = True
                j = 0
                while j < len(vv):
                    c, j = _varint(vv, j)
                    md["children"].append(c)
            elif ff == 6:
                md["children"].append(vv)
        md["stats"] = stats(md["stats"])
        p["emd"][key] = md
    p["stats"] = stats(p["raw_stats"])
    lines = []
    for raw in p["lines"]:
        ln = {"name": "", "ts": 0, "events": [], "display": None}
        for f, _w, v in _fields(raw):
            if f == 1:
                ln["id"] = v
            elif f == 2:
                ln["name"] = v.decode()
            elif f == 11:
                ln["display"] = v.decode()
            elif f == 3:
                ln["ts"] = v
            elif f == 4:
                ev = {"off": 0, "dur": 0, "stats": []}
                for ff, _, vv in _fields(v):
                    if ff == 1:
                        ev["md"] = vv
                    elif ff == 2:
                        ev["off"] = _signed(vv)
                    elif ff == 3:
                        ev["dur"] = vv
                    elif ff == 4:
                        ev["stats"].append(vv)
                    else:
                        p["unknown"] += 1
                ln["events"].append(ev)
            elif f not in (9, 10):
                p["unknown"] += 1
        for ev in ln["events"]:
            md = p["emd"][ev["md"]]
            ev["name"], ev["display"] = md["name"], md["display"]
            ev["start_ps"] = ln["ts"] * 1000 + ev["off"]
            ev["start_ns"], ev["end_ns"] = (
                ev["start_ps"] // 1000,
                (ev["start_ps"] + ev["dur"]) // 1000,
            )
            ev["stats"] = {**md["stats"], **stats(ev["stats"])}
        lines.append(ln)
    p["lines"] = lines
    return p


def _space(path: Path) -> dict:
    space = {"planes": [], "hostnames": [], "unknown": 0}
    for f, _, v in _fields(path.read_bytes()):
        if f == 1:
            space["planes"].append(_plane(v))
        elif f == 4:
            space["hostnames"].append(v.decode())
        else:
            space["unknown"] += 1
    return space


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("xplane_cleanroom")
    out = {}
    for name in xw.SCENARIOS:
        d = root / name
        truth = xw.write_scenario(name, d)
        spaces = {h: _space(d / info["file"]) for h, info in truth["hosts"].items()}
        out[name] = (d, truth, spaces)
    return out


def _device_planes(space, truth):
    prefix = "/device:TPU:" if truth["platform"] == "tpu" else "/device:GPU:"
    return {
        int(p["name"][len(prefix) :]): p for p in space["planes"] if p["name"].startswith(prefix)
    }


def _per_rank(truth, spaces):
    """rank -> (device plane, host plane, clock offset)."""
    out = {}
    for r in truth["ranks"]:
        space = spaces[r["host"]]
        host = next(p for p in space["planes"] if p["name"] == "/host:CPU")
        off = truth["hosts"][r["host"]]["clock_offset_ns"]
        out[r["rank"]] = (_device_planes(space, truth)[r["ordinal"]], host, off)
    return out


def _events(plane, line_name=None, prefix=None):
    return [
        ev
        for ln in plane["lines"]
        if (line_name is None or ln["name"] == line_name)
        and (prefix is None or ln["name"].startswith(prefix))
        for ev in ln["events"]
    ]


def _readable(ev) -> str:
    return ev["display"] or ev["name"]


def _is_nccl(ev) -> bool:
    return _readable(ev).startswith("nccl")


# --------------------------------------------------------------------------- tests
def test_scenarios_present_and_truth_file(written):
    assert set(xw.SCENARIOS) >= REQUIRED
    for name, (d, truth, _) in written.items():
        assert json.loads((d / "truth.json").read_text()) == truth
        assert truth["scenario"] == name
        assert set(xw.FORMAT_CHOICES) <= set(truth["variation"])
        for info in truth["hosts"].values():
            assert (d / info["file"]).is_file()


def test_layouts_and_hostnames(written):
    d, truth, spaces = written["two_hosts"]
    files = sorted(p.relative_to(d).as_posix() for p in d.rglob("*.xplane.pb"))
    assert len(files) == 2
    assert all(f.startswith("plugins/profile/") and f.count("/") == 3 for f in files)
    for host, space in spaces.items():
        assert space["hostnames"] == [host]
        assert len(_device_planes(space, truth)) == 2
    d, truth, _ = written["clean"]
    assert [p.name for p in d.glob("*.xplane.pb")] == ["gpu-node-0.xplane.pb"]


def test_counts_per_rank(written):
    for name, (_, truth, spaces) in written.items():
        per = _per_rank(truth, spaces)
        assert sorted(per) == list(range(truth["n_ranks"]))
        for r, (dev, host, _) in per.items():
            want = truth["counts_per_rank"][str(r)]
            streams = _events(dev, prefix="Stream #")
            got = {
                "kernel": sum(
                    1 for e in streams if "memcpy_details" not in e["stats"] and not _is_nccl(e)
                ),
                "memcpy": sum(1 for e in streams if "memcpy_details" in e["stats"]),
                "xla_op": len(_events(dev, "XLA Ops")),
                "xla_module": len(_events(dev, "XLA Modules")),
                "step": len(_events(dev, "Steps")),
                "host_launch": sum(
                    1
                    for e in _events(host)
                    if e["name"].startswith("cu")
                    and e["stats"].get("device_id") == truth["ranks"][r]["ordinal"]
                ),
            }
            if truth["platform"] == "gpu":
                got["collective"] = sum(1 for e in streams if _is_nccl(e))
            else:
                got["collective"] = sum(
                    1 for e in _events(dev, "XLA Ops") if any(w in e["name"] for w in COLL_WORDS)
                )
            assert got == want, (name, r)


def test_steps_and_collectives_match_truth(written):
    for name, (_, truth, spaces) in written.items():
        per = _per_rank(truth, spaces)
        for r, (dev, _, off) in per.items():
            gpu_events = _events(dev, prefix="Stream #") or _events(dev, "XLA Ops")
            for st in truth["steps"]:
                mine = [
                    e
                    for e in gpu_events
                    if e["stats"].get("group_id", e["stats"].get("run_id")) == st["step"]
                ]
                want = st["per_rank"][str(r)]
                assert min(e["start_ns"] for e in mine) - off == want["start_ns"], name
                assert max(e["end_ns"] for e in mine) - off == want["end_ns"], name
            steps = sorted(_events(dev, "Steps"), key=lambda e: e["start_ns"])
            for ev, st in zip(steps, truth["steps"], strict=False):
                assert ev["name"] == str(st["step_num"])
                assert ev["start_ns"] - off == st["per_rank"][str(r)]["start_ns"]
            if truth["platform"] == "gpu":
                colls = [e for e in _events(dev, prefix="Stream #") if _is_nccl(e)]
            else:
                colls = [e for e in gpu_events if any(w in e["name"] for w in COLL_WORDS)]
            colls.sort(key=lambda e: e["start_ns"])
            assert len(colls) == len(truth["collectives"])
            for ev, c in zip(
                colls, sorted(truth["collectives"], key=lambda c: c["start_ns"]), strict=True
            ):
                assert ev["start_ns"] - off == c["arrival_ns"][str(r)], name
                assert ev["end_ns"] - off == c["end_ns"], name
                assert c["end_ns"] - c["start_ns"] == c["transfer_ns"]
                if truth["platform"] == "gpu":
                    assert _readable(ev) == c["kernel"]
                    assert ev["stats"]["hlo_op"] == c["hlo_op"]
                else:
                    assert ev["name"] == c["hlo_op"]


def test_correlation_joins_launch_to_gpu_event(written):
    for name in ("clean", "two_hosts", "host_bound"):
        _, truth, spaces = written[name]
        for space in spaces.values():
            host = next(p for p in space["planes"] if p["name"] == "/host:CPU")
            launches = {
                e["stats"]["correlation_id"]: e
                for e in _events(host)
                if "correlation_id" in e["stats"]
            }
            gpu = [
                e
                for p in _device_planes(space, truth).values()
                for e in _events(p, prefix="Stream #")
            ]
            assert len(launches) == len(gpu)
            for e in gpu:
                launch = launches[e["stats"]["correlation_id"]]
                assert launch["end_ns"] <= e["start_ns"]
    # the correlation id counters of the two hosts overlap: ids are unique per file only
    _, truth, spaces = written["two_hosts"]
    ids = [
        {
            e["stats"]["correlation_id"]
            for p in s["planes"]
            if p["name"] == "/host:CPU"
            for e in _events(p)
            if "correlation_id" in e["stats"]
        }
        for s in spaces.values()
    ]
    assert ids[0] & ids[1]


def test_straggler_truth(written):
    _, truth, spaces = written["straggler_device"]
    st = truth["straggler"]
    assert st["rank"] == 2 and st["factor"] == 1.35
    for c in truth["collectives"]:
        if c["hlo_op"] != "all-gather.1":  # the first collective of a step comes before compute
            assert c["last_rank"] == 2
            assert c["wait_ns"]["2"] == 0
    assert st["others_wait_ns"] == sum(v for k, v in st["wait_ns_per_rank"].items() if k != "2")
    assert st["others_wait_ns"] > 0 and st["saving_ns"] > 0
    assert st["baseline_makespan_ns"] == written["clean"][1]["makespan_ns"]
    assert st["saving_ns"] == st["makespan_ns"] - st["baseline_makespan_ns"]
    per = _per_rank(truth, spaces)

    def mean_kernel(r):
        ks = [e["dur"] for e in _events(per[r][0], "Stream #13(Compute)")]
        return sum(ks) / len(ks)

    ratio = mean_kernel(2) / (sum(mean_kernel(r) for r in (0, 1, 3)) / 3)
    assert 1.25 < ratio < 1.45
    assert written["clean"][1]["straggler"] is None


def test_idle_share_host_bound_vs_clean(written):
    for name, lo, hi in (("host_bound", 0.5, 0.95), ("clean", 0.0, 0.05)):
        _, truth, spaces = written[name]
        for r, (dev, _, _) in _per_rank(truth, spaces).items():
            evs = sorted(_events(dev, prefix="Stream #"), key=lambda e: e["start_ns"])
            busy, cur_s, cur_e = 0, None, None
            for e in evs:
                if cur_e is None or e["start_ns"] > cur_e:
                    busy += 0 if cur_e is None else cur_e - cur_s
                    cur_s, cur_e = e["start_ns"], e["end_ns"]
                else:
                    cur_e = max(cur_e, e["end_ns"])
            busy += cur_e - cur_s
            idle = truth["idle"][str(r)]
            total_window = sum(idle["per_step_window_ns"])
            assert total_window - sum(idle["per_step_idle_ns"]) == busy
            assert lo < idle["idle_share"] < hi


def test_clock_offset_two_hosts(written):
    _, truth, spaces = written["two_hosts"]
    offsets = truth["clock_offsets_ns"]
    assert offsets == {"gpu-node-0": 0, "gpu-node-1": 1_734_567_891}
    ends = {}
    for host, space in spaces.items():
        for p in _device_planes(space, truth).values():
            ends.setdefault(host, []).append(
                sorted(e["end_ns"] for e in _events(p, prefix="Stream #") if _is_nccl(e))
            )
    a, b = ends["gpu-node-0"][0], ends["gpu-node-1"][0]
    assert {y - x for x, y in zip(a, b, strict=True)} == {offsets["gpu-node-1"]}


def test_tpu_planes(written):
    _, truth, spaces = written["tpu"]
    (space,) = spaces.values()
    for p in _device_planes(space, truth).values():
        names = {ln["name"] for ln in p["lines"]}
        assert {"XLA Ops", "XLA Modules", "Steps"} <= names
        assert not any(n.startswith("Stream") for n in names)
        assert p["stats"]["peak_teraflops_per_second"] == 197.0
    assert not [
        e
        for p in space["planes"]
        if p["name"] == "/host:CPU"
        for e in _events(p)
        if e["name"].startswith("cu")
    ]


def test_format_variations_visible(written):
    _, _, sp = written["clean"]
    (clean,) = sp.values()
    assert all(p["refs"] == 0 and p["unknown"] == 0 for p in clean["planes"])
    assert [p["name"] for p in clean["planes"]][:2] == ["/device:GPU:0", "/device:GPU:1"]
    gpu0 = clean["planes"][0]
    assert len({ln["ts"] for ln in gpu0["lines"]}) == 1
    assert any(md["display"] and md["name"].startswith("_Z") for md in gpu0["emd"].values())
    for ln in gpu0["lines"]:
        starts = [e["start_ps"] for e in ln["events"]]
        assert starts == sorted(starts)
    assert 1.7e18 < gpu0["lines"][0]["ts"] < 1.8e18
    assert any(md["children"] and md["packed"] for md in gpu0["emd"].values())

    _, _, sp = written["straggler_device"]
    (strag,) = sp.values()
    assert sum(p["refs"] for p in strag["planes"]) > 0
    gpu = next(p for p in strag["planes"] if p["name"] == "/device:GPU:0")
    assert any("kernel_details" in md["stats"] for md in gpu["emd"].values())
    assert len({ln["ts"] for ln in gpu["lines"]}) > 1
    assert any(
        [e["start_ps"] for e in ln["events"]] != sorted(e["start_ps"] for e in ln["events"])
        for ln in gpu["lines"]
    )

    _, _, sp = written["host_bound"]
    (hb,) = sp.values()
    names = [p["name"] for p in hb["planes"]]
    assert {"/host:metadata", "Task Environment"} <= set(names)
    assert any(p["unknown"] for p in hb["planes"]) and hb["unknown"]
    assert any(not ln["events"] for p in hb["planes"] for ln in p["lines"])
    assert max(k for p in hb["planes"] for k in p["emd"]) > 1000
    assert not any(md["display"] for p in hb["planes"] for md in p["emd"].values())

    _, _, sp = written["tpu"]
    (tpu,) = sp.values()
    assert any(
        md["children"] and not md["packed"] for p in tpu["planes"] for md in p["emd"].values()
    )


def test_determinism_by_seed(tmp_path):
    a = xw.write_scenario("two_hosts", tmp_path / "a", seed=3)
    b = xw.write_scenario("two_hosts", tmp_path / "b", seed=3)
    c = xw.write_scenario("two_hosts", tmp_path / "c", seed=4)
    assert a == b and a != c
    for info in a["hosts"].values():
        assert (tmp_path / "a" / info["file"]).read_bytes() == (
            tmp_path / "b" / info["file"]
        ).read_bytes()
        assert (tmp_path / "a" / info["file"]).read_bytes() != (
            tmp_path / "c" / info["file"]
        ).read_bytes()
    # format keywords left open are drawn from the seed and recorded
    small = {"devices_per_host": 2, "steps": 1}
    variations = [xw.write_job(tmp_path / f"s{s}", seed=s, **small)["variation"] for s in range(3)]
    drawn = {json.dumps({k: v[k] for k in xw.FORMAT_CHOICES}) for v in variations}
    assert len(drawn) > 1


def test_bad_options():
    with pytest.raises(TypeError):
        xw.write_job("/nonexistent", bogus=1)
    with pytest.raises(ValueError):
        xw.write_job("/nonexistent", hosts=2)
    with pytest.raises(KeyError):
        xw.write_scenario("nope", "/nonexistent")


def test_line_names_and_stats_per_kind(written):
    for name, (_, truth, spaces) in written.items():
        kinds = truth["event_stats"]
        for r, (dev, host, _) in _per_rank(truth, spaces).items():
            assert sorted(ln["name"] for ln in dev["lines"]) == sorted(truth["device_line_names"])
            by_kind = {
                "xla_op": _events(dev, "XLA Ops"),
                "xla_module": _events(dev, "XLA Modules"),
                "step": _events(dev, "Steps"),
            }
            if truth["platform"] == "gpu":
                streams = _events(dev, prefix="Stream #")
                by_kind["memcpy"] = [e for e in streams if e["name"].startswith("Memcpy")]
                by_kind["kernel"] = [e for e in streams if not e["name"].startswith("Memcpy")]
                ordinal = truth["ranks"][r]["ordinal"]
                by_kind["host_launch"] = [
                    e for e in _events(host) if e["stats"].get("device_id") == ordinal
                ]
            for kind, events in by_kind.items():
                for e in events:
                    assert set(kinds[kind]) <= set(e["stats"]), (name, kind, e["name"])
