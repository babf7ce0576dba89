"""import relattn needs no PyTorch; without PyTorch, relattn.torch is an
ImportError that names what is missing (tests/test_python.sh runs this with
and without torch)."""

import importlib.util
import sys

import relattn


def have_torch():
    try:
        return importlib.util.find_spec("torch") is not None
    except ImportError:   # a finder that refuses it (scripts/without-torch.sh)
        return False


assert "torch" not in sys.modules, "import relattn imported torch"
if not have_torch():
    try:
        import relattn.torch  # noqa: F401
    except ImportError as e:
        assert e.name == "torch" or "PyTorch" in str(e), "unclear error: %r" % e
        print("relattn.torch without PyTorch: %s: %s" % (type(e).__name__, e))
    else:
        raise AssertionError("import relattn.torch succeeded without torch")
print("import relattn %s imports no torch" % relattn.__version__)
