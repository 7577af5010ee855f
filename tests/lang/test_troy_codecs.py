"""`contraflow check` accepts every codec and processor the runtime builds, and refuses a bad config."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_process import run_cli

from contraflow.codecs import CODECS, POSTPROCESSORS, PREPROCESSORS
from contraflow.lang.errors import LangError
from contraflow.lang.troy.compiler import compile_source

CONFIGS = {"compress": {"algorithm": "zstd"}}  # the one processor that needs a config


def spec(name: str) -> str:
    return (
        f'{{"name": "{name}", "config": {CONFIGS[name]}}}'.replace("'", '"')
        if name in CONFIGS
        else f'"{name}"'
    )


def source(alias: str, codec: str, preprocessors: list[str], port: int) -> str:
    return f"""  define connector {alias} from udp_server
  with codec = {codec}, preprocessors = [{", ".join(preprocessors)}], config = {{"url": "127.0.0.1:{port}"}}
  end;
  create connector {alias};
  connect /connector/{alias} to /pipeline/p;"""


def flow(codec_spec: str = '"json"') -> str:
    """A source per codec, a probe source with `codec_spec` and every preprocessor, a sink with every
    postprocessor."""
    sources = [source(f"in_{i}", spec(name), [], 5000 + i) for i, name in enumerate(sorted(CODECS))]
    sources.append(source("probe", codec_spec, [spec(name) for name in sorted(PREPROCESSORS)], 5999))
    posts = ", ".join(spec(name) for name in sorted(POSTPROCESSORS))
    return f"""use tremor::pipelines;
define flow main
flow
  create pipeline p from pipelines::passthrough;
{chr(10).join(sources)}
  define connector out from tcp_client
  with codec = "syslog", postprocessors = [{posts}], config = {{"url": "127.0.0.1:6000"}}
  end;
  create connector out;
  connect /pipeline/p to /connector/out;
end;
deploy flow main;
"""


def test_check_accepts_every_codec_and_processor(tmp_path: Path) -> None:
    path = tmp_path / "formats.troy"
    path.write_text(flow())
    result = run_cli("check", path)
    assert result.returncode == 0, result.stderr
    for name in CODECS:
        assert f"codec={name}" in result.stdout
    assert "pre=" + ",".join(sorted(PREPROCESSORS)) in result.stdout
    assert "post=" + ",".join(sorted(POSTPROCESSORS)) in result.stdout


@pytest.mark.parametrize(
    ("codec_spec", "message"),
    [
        ('"influxx"', "unknown codec 'influxx'"),
        (
            '{"name": "json", "config": {"mod": "sorted"}}',
            "codec 'json': unknown config key 'mod' (did you mean 'mode'?); valid config keys: mode",
        ),
    ],
)
def test_check_refuses_what_the_runtime_would(codec_spec: str, message: str) -> None:
    text = flow(codec_spec)
    with pytest.raises(LangError) as caught:  # one mistake: one error, at the codec's line
        compile_source(text, "formats.troy")
    probe_line = text.splitlines().index("  define connector probe from udp_server") + 2
    assert caught.value.message == message and caught.value.position.line == probe_line
