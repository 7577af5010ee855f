"""Connector definitions written as Tremor 0.12/0.13 users write them compile unchanged."""

from __future__ import annotations

from contraflow.lang.troy.compiler import compile_source

FLOW = """
define flow tremor_shapes
flow
  define connector wsc from ws_client
  with
    codec = "json",
    config = {
      "url": "wss://localhost:65535",
      "socket_options": {"TCP_NODELAY": false},
      "tls": {"cafile": "./before/localhost.cert", "domain": "localhost"}
    },
    reconnect = {"retry": {"interval_ms": 500, "growth_rate": 2, "max_retries": 3}}
  end;
  define connector wss from ws_server
  with
    preprocessors = [{"name": "separate", "config": {"buffered": false}}],
    codec = "json",
    config = {"url": "0.0.0.0:65535", "tls": {"cert": "./before/localhost.cert", "key": "./before/localhost.key"}}
  end;
  define connector old_wsc from ws_client
  with codec = "json", config = {"url": "ws://127.0.0.1:4242/", "no_delay": false, "tls": false}
  end;
  define connector usrv from unix_socket_server
  with
    preprocessors = ["separate"], postprocessors = ["separate"], codec = "json",
    config = {"path": "/tmp/unix-socket.sock", "permissions": "=600", "buf_size": 1024}
  end;
  define connector ucli from unix_socket_client
  with codec = "json", config = {"path": "/tmp/unix-socket.sock", "buf_size": 1024}
  end;
  define connector tcpc from tcp_client
  with codec = "json", config = {"url": "localhost:4242", "no_delay": false, "buf_size": 1024, "tls": true}
  end;
  define connector tcps from tcp_server
  with
    codec = "json",
    config = {
      "url": "0.0.0.0:4242",
      "socket_options": {"SO_REUSEPORT": true, "SO_REUSEADDR": true, "TCP_NODELAY": true},
      "tls": {"cert": "c.pem", "key": "k.pem"}
    }
  end;
  define connector https from http_server
  with config = {"url": "https://localhost:8443", "tls": {"cert": "c.pem", "key": "k.pem"}} end;
  define connector httpc from http_client
  with config = {"url": "https://example.org", "method": "get", "tls": true} end;
  define pipeline pass pipeline select event from in into out; end;
  create connector wsc; create connector wss; create connector old_wsc; create connector usrv;
  create connector ucli; create connector tcpc; create connector tcps; create connector https;
  create connector httpc;
  create pipeline pass;
  connect /connector/wss to /pipeline/pass;
  connect /connector/usrv to /pipeline/pass;
  connect /pipeline/pass to /connector/wsc;
  connect /pipeline/pass to /connector/old_wsc;
  connect /pipeline/pass to /connector/ucli;
  connect /pipeline/pass to /connector/tcpc;
  connect /pipeline/pass to /connector/tcps;
  connect /pipeline/pass to /connector/https;
  connect /pipeline/pass to /connector/httpc;
end;
deploy flow tremor_shapes;
"""


def test_tremor_connector_definitions_compile_without_their_certificate_files() -> None:
    flow = compile_source(FLOW, "tremor.troy").flows["tremor_shapes"]
    kinds = sorted({c.kind for c in flow.connectors.values()})
    assert kinds == [
        "http_client",
        "http_server",
        "tcp_client",
        "tcp_server",
        "unix_socket_client",
        "unix_socket_server",
        "ws_client",
        "ws_server",
    ]
