"""Which commands keep freed heap memory: only those whose inputs are big (io.release_memory)."""

from __future__ import annotations

from tracediag.io.release_memory import inputs_are_big


def test_inputs_are_big_counts_files_and_directories_and_ignores_other_arguments(tmp_path):
    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    (run / "rank0" / "a.parquet").write_bytes(b"x" * 600)
    (run / "b.json").write_bytes(b"x" * 500)
    argv = ["report", str(run), "--format", "json", "-o", str(tmp_path / "missing.json")]
    assert inputs_are_big(argv, limit=1_100)
    assert not inputs_are_big(argv, limit=1_101)
    assert not inputs_are_big(["--version"], limit=1)


def test_inputs_are_big_follows_no_link_loop_and_stops_on_a_huge_tree(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "empty.bin").write_bytes(b"")
    (run / "loop").symlink_to(run, target_is_directory=True)  # a link back: not followed
    assert not inputs_are_big([str(run)], limit=1)
    for i in range(30):
        (run / f"d{i}").mkdir()
    (run / "d29" / "big.bin").write_bytes(b"x" * 10)
    assert inputs_are_big([str(run)], limit=10)
    assert not inputs_are_big([str(run)], limit=10, max_entries=5)
