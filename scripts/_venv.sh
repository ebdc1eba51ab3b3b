# Sourced by scripts/run and scripts/test: make .venv with the project installed.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
extras="$1"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "watchkeeper needs Python 3.11 or newer (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
stamp=".venv/.installed-$extras-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "installing into .venv ($extras), first run, about 2 min..." >&2
    "$PYTHON" -m venv .venv
  else
    echo "updating .venv ($extras): pyproject.toml or the extras changed..." >&2
  fi
  # PYTHONWARNINGS: setuptools' "Editable installation" box says nothing to a user.
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet --upgrade pip
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet -e ".[$extras]"
  echo "installed." >&2
  rm -f .venv/.installed-"$extras"-*
  touch "$stamp"
fi
# The project's own modules compiled ahead (again when a source is newer): a start then
# compiles none of them, even where bytecode cannot be written at run time
# (PYTHONDONTWRITEBYTECODE, a read-only checkout), where every start would otherwise
# compile them again, about a quarter of a second before the first long poll.
compiled=".venv/.compiled"
if [ ! -f "$compiled" ] || [ -n "$(find agent channels scheduler storage runtime -name '*.py' -newer "$compiled" -print -quit)" ]; then
  touch "$compiled"
  if ! .venv/bin/python -m compileall -q agent channels scheduler storage runtime >/dev/null; then
    echo "note: could not compile every module ahead; Python compiles them as they load" >&2
    rm -f "$compiled"
  fi
fi
