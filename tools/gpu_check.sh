#!/usr/bin/env bash
# The test suite against a real CUDA GPU (CONTRIBUTING.md, "The GPU check"), from the repo root:
#   bash tools/gpu_check.sh [pytest args and test files; default: test/]
# Wheels in .whl/ (expecttest, where the image lacks it) are installed first.
set -uo pipefail
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null || exit 1
{
    date -u +%Y-%m-%dT%H:%MZ
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, torch.version.git_version, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    git rev-parse --short HEAD 2>/dev/null || true
} | tee "$out/env.txt"
python3 -m pytest -rs -p no:cacheprovider "${@:-test/}" 2>&1 | tee "$out/pytest.log"
exit "${PIPESTATUS[0]}"
