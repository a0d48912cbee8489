#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image; the zip is unpacked in
# /autograder/source. It makes a Python 3.11 virtual environment in /autograder/venv and installs the
# course into it with its pinned dependencies (pyproject.toml). Written by `shardlab gradescope build`.
#
# Python 3.11, which the pins need: Gradescope's default base image is Ubuntu 22.04, whose archive
# (universe) packages python3.11 and python3.11-venv. Where apt has no 3.11 (Ubuntu 20.04, 24.04), uv
# from PyPI fetches a standalone CPython 3.11 instead, so no third-party apt repository is needed.
set -euo pipefail

root="${SHARDLAB_AUTOGRADER:-/autograder}"
venv="$root/venv"
uv_version="0.13.8"

has_python311() { python3.11 -c "import ensurepip, venv" >/dev/null 2>&1; }

export DEBIAN_FRONTEND=noninteractive
if ! has_python311; then
    apt-get update
    apt-get install -y --no-install-recommends python3.11 python3.11-venv || true
fi

if has_python311; then
    python3.11 -m venv "$venv"
else
    echo "setup.sh: no python3.11 from apt; a standalone CPython 3.11 through uv $uv_version"
    apt-get install -y --no-install-recommends python3-venv ca-certificates
    python3 -m venv /opt/shardlab-uv
    /opt/shardlab-uv/bin/python -m pip install "uv==$uv_version"
    /opt/shardlab-uv/bin/uv venv --seed --python 3.11 "$venv"
fi

# The sandbox for the student's code (bubblewrap). Where the image's container cannot create namespaces,
# grading falls back to Landlock or a plain process and report.json says which was in force.
apt-get install -y --no-install-recommends bubblewrap \
    || { apt-get update && apt-get install -y --no-install-recommends bubblewrap; } \
    || echo "setup.sh: bubblewrap not installed"

# Editable: the grader finds the tests beside its own package (grader/course/paths.py), in /autograder/source.
"$venv/bin/python" -m pip install --no-cache-dir -e "$root/source"

# Fail the image build here rather than every submission later.
"$venv/bin/python" -I -c "
from grader.course.devices import force_host_devices, verify_host_devices
force_host_devices()
verify_host_devices()
import grader.cli, grader.course.paths, jax
print('shardlab ready in', grader.course.paths.REPO_ROOT, 'with jax', jax.__version__, 'on', jax.device_count(), 'devices')
"
