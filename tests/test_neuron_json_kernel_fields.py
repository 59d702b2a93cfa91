"""Legacy device JSON carrying ``bir_debug_info_source_location`` and a ``tensor_info`` table.

The clean-room device writer (``tests/cleanroom/neuron_device_writer.py``) writes both in its
Parquet (``Instruction.bir_debug_info_source_location``, ``TensorInfo``) but not in its legacy
JSON, whose instruction rows otherwise carry the Parquet field names (``bir_id``,
``hbm_read_bytes``, ``nki_source_location``). The JSON here is the writer's, with the two added
the way the reference lays legacy tables out (neuron-formats.md: a list of row objects per table,
"treat any other list-of-objects as an extra table"): each instruction row gets its
``bir_debug_info_source_location`` from the writer's own Parquet row (the same rows, same order,
same ids), the document a ``tensor_info`` table holding the writer's ``TensorInfo`` rows.
Rank 1 keeps ``nki_source_location`` as a list of strings, as its description says.

Every expected figure is the writer's (its Parquet tables, its TensorInfo
``load_to_sbuf_repeat_factor``), never our reader's.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

import tracediag
from tests.cleanroom import neuron_device_writer as device_writer
from tracediag.model import schema as S
from tracediag.model.findings import Severity


def _augment(root, truth) -> None:
    for rank, rel in truth["files"]["json"].items():
        path = root / rel
        doc = json.loads(path.read_text())
        profile = root / truth["files"]["parquet"][rank]
        instr = pq.read_table(
            profile / "Instruction.parquet",
            columns=["id", "bir_debug_info_source_location", "nki_source_location"],
        ).to_pylist()
        assert [r["id"] for r in doc["instruction"]] == [r["id"] for r in instr]
        for row, written in zip(doc["instruction"], instr, strict=True):
            row["bir_debug_info_source_location"] = written["bir_debug_info_source_location"]
            if rank == "1" and written["nki_source_location"] is not None:
                row["nki_source_location"] = [written["nki_source_location"], "kernel.py:1"]
        doc["tensor_info"] = pq.read_table(profile / "TensorInfo.parquet").to_pylist()
        path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("json_kernel_fields")
    truth = device_writer.write_scenario("slow_weight_dma", root, formats=("json", "parquet"))
    _augment(root, truth)
    loaded = tracediag.load(str(root / "json"), cache=False)
    return root, truth, loaded, tracediag.diagnose(loaded)


def _tensors(root, truth, rank):
    return pq.read_table(root / truth["files"]["parquet"][str(rank)] / "TensorInfo.parquet")


def test_tensor_info_gives_the_writers_sizes_and_io_bytes(job):
    root, truth, loaded, _ = job
    for rank in (0, 1):
        rows = _tensors(root, truth, rank).to_pylist()
        info = loaded.meta[rank].info
        assert info["tensor_sizes"] == {r["variable_name"]: r["size"] for r in rows}
        io = sum(r["size"] for r in rows if r["type"] in ("IN", "OUT"))
        assert info["tensor_io_bytes"] == io == 13_369_344


def test_instructions_carry_the_writers_source_lines(job):
    root, truth, loaded, _ = job
    ev = loaded.events
    for rank in (0, 1):
        written = pq.read_table(
            root / truth["files"]["parquet"][str(rank)] / "Instruction.parquet",
            columns=["bir_debug_info_source_location", "nki_source_location"],
        ).to_pylist()
        # bir first (the field AWS's investigations use), else nki (rank 1's lists joined).
        want = Counter(
            r["bir_debug_info_source_location"]
            or (r["nki_source_location"] and f"{r['nki_source_location']}; kernel.py:1")
            if rank == 1
            else r["bir_debug_info_source_location"] or r["nki_source_location"]
            for r in written
        )
        del want[None]
        mine = ev.loc[(ev["rank"] == rank) & (ev[S.KIND] == "compute"), S.SOURCE]
        assert Counter(mine.dropna().astype(str)) == want
        assert sum(want.values()) == 1257  # of the rank's 1307 instructions


def test_redundant_transfers_are_found_as_the_writer_repeats_them(job):
    """DMA105 from JSON: each weight is loaded twice per step (forward and backward), as the
    writer's TensorInfo ``load_to_sbuf_repeat_factor`` says; before, it needed Parquet."""
    root, truth, _, diagnosis = job
    repeat = {
        r["variable_name"]: r["load_to_sbuf_repeat_factor"]
        for r in _tensors(root, truth, 0).to_pylist()
        if r["variable_name"].startswith("layers.")
    }
    found = {f.evidence["tensor"]: f for f in diagnosis.findings if f.code == "DMA105"}
    assert set(found) == set(repeat)  # the 8 weights; inputs and outputs move once
    for tensor, f in found.items():
        assert f.evidence["times_moved"] == pytest.approx(repeat[tensor])
        assert f.ranks == (0, 1)
    slow = truth["findings"][0]["tensor"]  # layers.2.mlp.weight, the slowed transfers
    top = max(found.values(), key=lambda f: f.saving_ns)
    assert top.evidence["tensor"] == slow and top.severity >= Severity.WARNING
