"""Troy files that take values from script modules: constants as flow argument defaults, grouped `use`."""

from __future__ import annotations

from pathlib import Path

from contraflow.lang.troy.compiler import compile_file


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


FLOW = """
use lib::{consts, names as n};
define flow main
args interval = consts::DEFAULT_MS * 1000000, label = n::PREFIX
flow
  define connector tick from metronome
  args every
  with config = {"interval": args.every} end;
  create connector tick with every = args.interval end;
end;
deploy flow main;
deploy flow fast from main with interval = 1 end;
"""


def test_module_constants_are_flow_argument_defaults(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "flow.troy": FLOW,
            "lib/consts.tremor": "const DEFAULT_MS = 250;\n",
            "lib/names.tremor": 'const PREFIX = "svc-";\n',
        },
    )
    deployment = compile_file(tmp_path / "flow.troy", search_path=[])
    main, fast = deployment.flows["main"], deployment.flows["fast"]
    assert main.args == {"interval": 250_000_000, "label": "svc-"}
    assert main.connectors["tick"].config == {"interval": 250_000_000}
    assert fast.connectors["tick"].config == {"interval": 1}
