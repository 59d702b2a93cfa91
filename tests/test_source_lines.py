"""``--by source``: the critical path, the findings and the bounds per source line, checked on a
generated DMA-bound kernel against hand computations from its Parquet tables (read with pandas,
not our reader), and the TUI's event pane showing the selected event's line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracediag.analysis.source_lines import bounds_by_source, path_by_source
from tracediag.cli.main import main
from tracediag.engine.diagnose import diagnose
from tracediag.loading.loader import load

ROOT = Path(__file__).resolve().parents[1]
NO_SOURCE_TRACE = ROOT / "sample_traces" / "neuron_parquet_straggler" / "parquet"
RELOAD_LINE = "matmul_kernel.py:24"  # the line that reloads every B tile


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kernel") / "dma_reloads"
    assert main(["generate", "dma_reloads", str(out), "-q"]) == 0
    return out


@pytest.fixture(scope="module")
def diagnosis(kernel):
    return diagnose(load([kernel / "parquet"]))


def _tables(kernel: Path) -> dict[str, pd.DataFrame]:
    rank = kernel / "parquet" / "rank_0"
    ins = pd.concat([pd.read_parquet(p) for p in sorted(rank.glob("Instruction_*.parquet"))])
    return {
        "ins": ins,
        "packet": pd.read_parquet(rank / "DmaPacket.parquet"),
        "agg": pd.read_parquet(rank / "DmaPacketAggregated.parquet"),
        "flow": pd.read_parquet(rank / "Flow.parquet"),
        "meta": pd.read_parquet(rank / "Metadata.parquet"),
    }


def _hand_lines(t: dict[str, pd.DataFrame]) -> pd.Series:
    """Profile id -> source line: instructions their own, DMA packets their trigger's (packet ->
    its aggregated transfer -> the Flow from the instruction that triggered it)."""
    ins_line = t["ins"].set_index("id")["bir_debug_info_source_location"]
    trigger = t["flow"][t["flow"]["out_table"] == "dma_block"].set_index("out_id")["in_id"]
    agg_line = trigger.map(ins_line)
    packet_line = t["packet"].set_index("id")["packet_aggregation_id"].map(agg_line)
    return pd.concat([ins_line, packet_line])


def test_path_time_per_source_line_matches_a_hand_sum(kernel, diagnosis):
    seg = diagnosis.analysis.path.segments
    ours = path_by_source(diagnosis.trace, seg)
    # By hand: each path segment's event -> its profile id (src_id) -> the line from Parquet.
    src_id = diagnosis.trace.events["src_id"].to_numpy()
    ids = src_id[seg["event"].to_numpy()]
    line = pd.Series(ids).map(_hand_lines(_tables(kernel))).fillna("").to_numpy()
    hand = pd.Series(seg["dur_ns"].to_numpy()).groupby(line).sum()
    assert set(ours.index) == set(hand.index)
    for name, ns in hand.items():
        assert ours.at[name, "path_ns"] == pytest.approx(ns, rel=0.01), name
    # the reloads' line holds most of this DMA-bound path, all of it in DMA transfers
    assert ours.index[0] == RELOAD_LINE
    assert ours.at[RELOAD_LINE, "path_ns"] > 0.8 * seg["dur_ns"].sum()
    assert ours.at[RELOAD_LINE, "dma_transfer_ns"] == ours.at[RELOAD_LINE, "path_ns"]
    assert ours["path_ns"].sum() == seg["dur_ns"].sum()


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    order = np.argsort(start)
    total, cur_s, cur_e = 0, None, None
    for s, e in zip(start[order], end[order], strict=True):  # a few hundred packets, by hand
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return int(total + (cur_e - cur_s if cur_e is not None else 0))


def test_bounds_of_one_source_line_match_a_hand_computation(kernel, diagnosis, capsys):
    t = _tables(kernel)
    line = _hand_lines(t)
    pk = t["packet"]
    mine = pk[pk["id"].map(line) == RELOAD_LINE]
    dma_active = _union_ns(mine["start_ts"].to_numpy(), mine["end_ts"].to_numpy())
    nbytes = mine.loc[mine["transfer_bytes"] > 4, "transfer_bytes"].sum()
    peak = float(t["meta"]["dma_ddr_bandwidth"].iat[0])  # one physical core
    ideal = nbytes / peak * 1e9
    ins = t["ins"][t["ins"]["bir_debug_info_source_location"] == RELOAD_LINE]
    sync_busy = _union_ns(ins["start_ts"].to_numpy(), ins["end_ts"].to_numpy())

    table = bounds_by_source(diagnosis.trace, diagnosis.analysis.hardware)
    row = table.loc[(0, RELOAD_LINE)]
    assert row["memory_bound_ns"] == pytest.approx(dma_active, rel=0.01)
    assert row["memory_ideal_ns"] == pytest.approx(ideal, rel=0.01)
    assert row["dma_bytes"] == nbytes
    assert row["pipeline_bound_ns"] == pytest.approx(max(dma_active, sync_busy), rel=0.01)
    assert row["bottleneck"] == "dma"
    assert row["events"] == len(mine) + len(ins)

    assert (
        main(["bounds", str(kernel / "parquet"), "--by", "source", "--format", "json", "-q"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["source_lines"]
    first = rows[0]
    assert first["source_line"] == RELOAD_LINE  # most pipeline time first
    assert first["bounds_ns"]["memory_bound"] == pytest.approx(dma_active, rel=0.01)
    assert first["bounds_ns"]["memory_ideal"] == pytest.approx(ideal, rel=0.01)
    assert main(["bounds", str(kernel / "parquet"), "--by", "source", "--top", "2", "-q"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("rank 0: bounds per source line (ns)\n")
    assert len(text.splitlines()) == 4 and RELOAD_LINE in text.splitlines()[2]
    assert f"{round(dma_active):,}" in text


def test_report_by_source_groups_path_and_findings(kernel, capsys):
    path = str(kernel / "parquet")
    assert main(["report", path, "--by", "source", "--format", "json", "-q"]) == 0
    section = json.loads(capsys.readouterr().out)["by_source"]
    top = section["critical_path"]["top"]
    assert top[0]["source_line"] == RELOAD_LINE and top[0]["path_pct"] > 80
    # DMA105 (the reloaded tensor B) points at the reloading line, with its saving
    first = section["findings"][0]
    assert first["source_line"] == RELOAD_LINE
    assert [f["code"] for f in first["findings"]][0] == "DMA105"
    assert first["findings"][0]["saving_ns"] > 0.3 * section["critical_path"]["length_ns"]
    assert main(["report", path, "--by", "source", "-q"]) == 0
    text = capsys.readouterr().out
    assert "Critical path by source line (top 5 of 5 lines" in text
    assert f"  {RELOAD_LINE}: DMA105 (224 events, saving" in text
    assert max(len(x) for x in text.splitlines()) <= 100
    assert main(["report", path, "--by", "source", "--format", "html", "-q"]) == 2


def test_trace_without_source_lines_says_so_in_one_line(capsys):
    assert main(["bounds", str(NO_SOURCE_TRACE), "--by", "source", "-q"]) == 0
    out = capsys.readouterr().out
    assert out == "no source lines in this trace (its events carry no source location)\n"
    assert main(["report", str(NO_SOURCE_TRACE), "--by", "source", "-q"]) == 0
    tail = capsys.readouterr().out.rstrip().splitlines()
    assert tail[-1] == "no source lines in this trace (its events carry no source location)."
    assert tail[-3] == "By source line"


def test_tui_event_pane_shows_the_source_line(diagnosis):
    from tracediag.tui.app import make_app
    from tracediag.tui.timeline_screen import TimelineScreen

    ev = diagnosis.trace.events
    matmul = int(np.flatnonzero(ev["name"].astype(str).to_numpy() == "MATMUL")[0])
    dma = int(np.flatnonzero(ev["kind"].astype(str).to_numpy() == "dma")[0])
    app = make_app(diagnosis=diagnosis)
    seen = {}

    async def main_():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("f", "t")
            assert isinstance(app.screen, TimelineScreen)
            for name, event in (("matmul", matmul), ("dma", dma)):
                app.screen.state.select(event)
                app.screen._update()
                await pilot.pause()
                seen[name] = dict(app.screen.info_rows)["event"]

    asyncio.run(main_())
    assert seen["matmul"] == "MATMUL  at matmul_kernel.py:31"
    assert seen["dma"] == "A  at matmul_kernel.py:21 (its trigger's line)"
