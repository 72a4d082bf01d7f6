# Source this on a GPU runner that has no package index (see README, "Recording on a GPU runner"):
#   source tools/runner-env.sh        # installs the wheelhouse in .whl/ (made by tools/runner-wheels.sh) into /tmp/site
# It keeps the runner's own CuPy, PyTorch, Triton, numpy and pytest, adds Jupyter's kernel stack and nbval,
# puts the course on PYTHONPATH and registers the python3 kernel that nbclient and nbval start.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="/tmp/site/bin:$PATH"
  export JUPYTER_PLATFORM_DIRS=1
  python3 -m ipykernel install --user --name python3 >/dev/null
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
