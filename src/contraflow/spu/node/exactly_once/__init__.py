"""Exactly-once commits of staged batches: the staging (`transactions`), a lone SPU's atomic
multi-partition commit journalled in a file (`journal`, undone by `rollback`), a cluster's
per-partition commit at the leader (`replicated`) with its ledger read from the log's commit
marks (`log_ledger`). `strategy` puts both behind one interface, chosen once at start.
"""
