# Two commands on a fresh machine (see README):
#   make book    set up .venv from requirements.txt and build the book into _build/html
#   make test    the CPU test suite (compile checks, labkit, grader, notebooks, book build, browser test)
PY := .venv/bin/python
BOOK_FLAGS := -W -n --keep-going

.PHONY: book test setup clean gpu-check

setup: .venv/.installed

.venv/.installed: requirements.txt
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

book: setup
	.venv/bin/jupyter-book build . $(BOOK_FLAGS)
	@echo "Open _build/html/index.html"

test: setup
	$(PY) -m pytest

gpu-check:
	python3 -m labkit gpu-check

clean:
	rm -rf _build
