# Sourced by the scripts in this folder (not run): `interlace_python ROOT MODULES [EXTRAS]`
# sets PY to a Python that has every module in MODULES (comma-separated), trying in order
#   1. ROOT/.venv, when it exists and has them all: a checkout set up once never runs pip again
#      (the scripts used to probe only the system `python`, so every call re-ran pip: 9 s);
#   2. `python` on PATH, when it has them all (e.g. an activated virtualenv);
#   3. otherwise it installs the checkout, with EXTRAS, into ROOT/.venv (made if missing).
# Modules are looked up, not imported (torch takes seconds to import), so a probe costs one
# interpreter start. With ROOT/.venv chosen, its bin/ goes first on PATH for child processes.
interlace_python() {
  local root=$1 modules=$2 extras=${3:-}
  local probe='import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1].split(",")))'
  if [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" -c "$probe" "$modules" 2>/dev/null; then
    PY="$root/.venv/bin/python"
  elif command -v python >/dev/null 2>&1 && python -c "$probe" "$modules" 2>/dev/null; then
    PY=python
    return 0
  else
    [ -x "$root/.venv/bin/python" ] || python3 -m venv "$root/.venv"
    echo "$(basename "$0"): installing this checkout${extras:+ with [$extras]} into $root/.venv" \
      "(the first time only)" >&2
    "$root/.venv/bin/pip" install -q --disable-pip-version-check -e "$root${extras:+[$extras]}"
    PY="$root/.venv/bin/python"
  fi
  export PATH="$root/.venv/bin:$PATH"
}
# what `pip install -e .` brings (setup.cfg install_requires), as import names
INTERLACE_MODULES=zmq,msgpack,numpy,networkx,rustworkx,scipy,cvxpy,structlog,matplotlib
