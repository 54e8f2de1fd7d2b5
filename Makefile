# Two commands on a fresh machine: `make demo` (the main job on the bundled example) and `make test`.
# Each creates its own virtualenv in .venv and installs Gradian into it. No GPU, no model hub.
VENV ?= .venv
PYTHON ?= python3
# The CPU build of torch; on a GPU machine use e.g. `make TORCH_SPEC=torch demo`.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
OUT ?= gradian-out

.PHONY: demo test typecheck lint install clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/gradian demo --out $(OUT)

# The type checker first (config in pyproject.toml), then the fast tier, then the slow one.
test: $(BIN)/.installed
	$(BIN)/mypy
	$(BIN)/python -m pytest -m "not slow"
	$(BIN)/python -m pytest -m slow

typecheck: $(BIN)/.installed
	$(BIN)/mypy

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
