#!/usr/bin/env bash
# without-torch.sh COMMAND [ARG...] - runs COMMAND with PyTorch and
# torchvision out of sight of every python3, as on a machine where they were
# never installed: `import torch` raises ModuleNotFoundError.
#
# How: PYTHONUSERBASE points at a throw-away directory whose user
# site-packages hold a usercustomize.py (imported by site.py at start-up) that
# puts a finder refusing torch* and torchvision* first on sys.meta_path. The
# packages stay installed; nothing outside that directory changes. Interpreters
# started with -s, -S or -I skip the user site and still see PyTorch.
#
# Refuses to run (exit 2) when python3 still imports torch under it, so a
# caller never believes it tested the case without PyTorch when it did not.
# Exit status: COMMAND's.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
base=$(mktemp -d /tmp/relattn-notorch.XXXXXX)
trap 'rm -rf "$base"' EXIT

# one user site per Python version that a python3 here may be
versions=()
for py in /usr/bin/python3 python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  versions+=("$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)")
done
for v in "${versions[@]}" 3.9 3.10 3.11 3.12 3.13; do
  [ -n "$v" ] || continue
  site=$base/lib/python$v/site-packages
  [ -e "$site/usercustomize.py" ] && continue
  mkdir -p "$site"
  cat >"$site/usercustomize.py" <<'PY'
# scripts/without-torch.sh: PyTorch is not installed, as far as anyone asks.
import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in ("torch", "torchvision"):
            raise ModuleNotFoundError("No module named %r" % fullname, name=fullname)
        return None


sys.meta_path.insert(0, _NoTorch())
PY
done

export PYTHONUSERBASE=$base
unset PYTHONNOUSERSITE
for py in /usr/bin/python3 python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import torch' >/dev/null 2>&1 || "$py" -c 'import torchvision' >/dev/null 2>&1; then
    echo "without-torch: $py still imports torch or torchvision; not running $*" >&2
    exit 2
  fi
done
echo "without-torch: PyTorch hidden from python3; running $*" >&2
"$@"
