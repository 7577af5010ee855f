"""Trickle operators written in Python: `python::map` (one event at a time, with state) and
`python::batch` (a whole batch of record events as an Arrow table).

- `modules`: finding and importing the user's function, checking it at deploy, what to ship;
- `tables`: channel values to a `pyarrow.Table` and a result table back to channel values;
- `runners`: the two operators as node runners of the executor.
"""
