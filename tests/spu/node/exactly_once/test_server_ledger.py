"""The batch ledger on real files: recovery of a torn tail, dangling intents,
retention with a remembered floor, compaction."""

from __future__ import annotations

from pathlib import Path

from contraflow.spu.node.exactly_once.journal import BatchLedger


def test_records_survive_reopen_and_a_torn_tail_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    ledger = BatchLedger(path)
    ledger.record_intent("p", 1, {("t", 0): 5})
    ledger.record_commit("p", 1, {("t", 0): 9, ("u", 2): 3})
    ledger.record_intent("p", 2, {("t", 0): 9})
    ledger.close()
    good_size = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x40garbage")  # a record cut short by a crash
    reopened = BatchLedger(path)
    assert path.stat().st_size == good_size
    assert reopened.lookup("p", 1) == {("t", 0): 9, ("u", 2): 3}
    assert reopened.lookup("p", 2) is None
    assert [(d.producer_id, d.batch_id, d.starts) for d in reopened.dangling()] == [("p", 2, {("t", 0): 9})]
    reopened.record_abort("p", 2)
    reopened.close()
    with BatchLedger(path) as final:
        assert final.dangling() == []


def test_flipped_byte_ends_the_journal_at_the_last_intact_record(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    ledger = BatchLedger(path)
    ledger.record_commit("p", 1, {("t", 0): 1})
    size_after_first = path.stat().st_size
    ledger.record_commit("p", 2, {("t", 0): 2})
    ledger.close()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with BatchLedger(path) as reopened:
        assert reopened.lookup("p", 1) == {("t", 0): 1}
        assert reopened.lookup("p", 2) is None
    assert path.stat().st_size == size_after_first


def test_retention_remembers_a_floor_across_compaction_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    ledger = BatchLedger(path, retain_per_producer=3)
    for batch in range(1, 1100):  # enough records to trigger compaction
        ledger.record_commit("p", batch, {("t", 0): batch})
    ledger.record_commit("other", 1, {("t", 1): 1})
    assert ledger.is_forgotten("p", 1096) and not ledger.is_forgotten("p", 1097)
    assert ledger.lookup("p", 1099) == {("t", 0): 1099}
    ledger.close()
    assert path.stat().st_size < 1000 * 20  # compacted, not 1100 records
    with BatchLedger(path, retain_per_producer=3) as reopened:
        assert reopened.is_forgotten("p", 5)
        assert reopened.lookup("p", 1097) == {("t", 0): 1097}
        assert reopened.lookup("other", 1) == {("t", 1): 1}
        assert not reopened.is_forgotten("other", 0)
