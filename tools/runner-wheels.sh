#!/usr/bin/env bash
# The wheelhouse for a GPU runner without a package index: the Jupyter pieces that nbval and the
# recording need (nbval, ipykernel, nbclient, nbformat, ipywidgets and what they pull in), as wheels for
# the runner's Python 3.12 on x86-64 Linux. Run it where pip can reach an index:
#   bash tools/runner-wheels.sh [DIR]     # DIR defaults to .whl/ (git-ignored); carry it to the runner
# and there `source tools/runner-env.sh`, which installs DIR into /tmp/site.
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
python3 -m pip download --quiet --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any --dest "$dir" nbval ipykernel ipywidgets nbclient nbformat 2>&1 | grep -v "is ignored" || true
# The runner's image has these already; a second copy ahead of it on PYTHONPATH would shadow the
# versions its CuPy, PyTorch and pytest were built and tested with.
for pkg in numpy matplotlib pytest pluggy iniconfig packaging pygments tqdm psutil attrs coverage \
           python_dateutil six typing_extensions tzdata; do
    rm -f "$dir/$pkg"-[0-9]*.whl
done
echo "$(ls "$dir"/*.whl | wc -l) wheels in $dir ($(du -sh "$dir" | cut -f1))"
