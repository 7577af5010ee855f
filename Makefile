# Two entry points for a fresh machine (see README): `make run` and `make test`.
# Both create the virtualenv and install what they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck unit browser netns bench partitions flow-partition clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/contraflow run examples/classify/flow.troy

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) browser netns
	$(BIN)/pytest -q

# The live flow page is tested in Debian's headless chromium (driven by playwright, which
# downloads no browser of its own); install it when missing (CI runs as root).
browser:
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }

# The partition tests (tests/faults/) put the SPUs in network namespaces behind a router namespace
# and cut links with its rules (iproute2's `ip`), drop a share of a link's packets (nftables'
# `nft`) and delay them (an `iptables` NFQUEUE rule); root, as CI has.
netns:
	@command -v ip >/dev/null && command -v nft >/dev/null && command -v iptables >/dev/null \
		|| { apt-get update && apt-get install -y iproute2 nftables iptables; }

test: lint typecheck unit

# A longer randomized run of partitions, SIGSTOPs and SIGKILLs on the partition tests' cluster
# (benchmarks/partitions.py; root): prints its seed first, `make partitions SEED=N` replays it.
SECONDS_RUN ?= 300
partitions: $(STAMP) netns
	PYTHONPATH=src $(BIN)/python benchmarks/partitions.py --seconds $(SECONDS_RUN) $(if $(SEED),--seed $(SEED))

# A flow across hosts (benchmarks/flow_partition.py; root): the runtime, a Spark standalone master,
# two workers, the controller and three SPUs each on a node of its own; the runtime cut from a
# channel's leader, then a worker from everything else; prints its seed, `SEED=N` replays it.
flow-partition: $(STAMP) netns
	PYTHONPATH=src $(BIN)/python benchmarks/flow_partition.py --standalone $(if $(SEED),--seed $(SEED))

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean:
	rm -rf $(VENV) contraflow-data .pytest_cache .mypy_cache .ruff_cache
