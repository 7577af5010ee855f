"""Columnar execution of stateless pipeline code: a whole Arrow batch of events per call.

The vectorizable part of Trickle and tremor-script (field access, literals,
comparisons, boolean logic, `match` on literals, records from fields, `let
$key`, `where`, `select event` / `select {...}`, streams) compiles into
column expressions run with pyarrow over the batch; a graph with anything
else keeps the per-event executor, and rows the columns cannot answer exactly
run through it too, so the results are the executor's, in its order.

- `ir`: the expression tree; `lowering`: tremor-script to it;
- `routes`: the graph as the routes an event takes, in emission order;
- `fields`: the fields read and their Arrow types; `parse`: JSON to columns;
- `evaluate`: expressions over a parsed batch; `plan`: all of it per batch.
"""

from contraflow.pipeline.columnar.plan import ColumnarPlan, ColumnarTraced

__all__ = ["ColumnarPlan", "ColumnarTraced"]
