"""The Python package against the command line: the same index, the same
outputs (one way through the library: ra_run_*), the same messages.

Run by tests/test_python.sh: python3 test_numpy.py BIN FIXTURES (with the
package on PYTHONPATH or installed)."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import relattn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "tools"))
sys.dont_write_bytecode = True
import st  # noqa: E402

BIN, FIXTURES = sys.argv[1], sys.argv[2]
del sys.argv[1:3]


def cli(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def cases(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return [ln.split()[0] for ln in f if ln.strip() and not ln.startswith("#")]


class Index(unittest.TestCase):
    def test_same_as_cli(self):
        for kw, args in [
                (dict(window=(7, 7)), ["--window", "7x7"]),
                (dict(window=(3, 5)), ["--window", "3x5"]),
                (dict(window=2), ["--window", "2"]),
                (dict(window=(2, 2), frames=7, kv_frames=4),
                 ["--window", "2x2", "--frames", "7", "--kv-frames", "4"]),
                (dict(window=(2, 3), frames=3, kv_frames=2),
                 ["--window", "2x3", "--frames", "3", "--kv-frames", "2"]),
                (dict(length=9, clip=3), ["--length", "9", "--clip", "3"]),
                (dict(length=1, clip=0), ["--length", "1", "--clip", "0"])]:
            rc, out, err = cli("index", *args)
            self.assertEqual(rc, 0, err)
            want = np.array([[int(v) for v in ln.split()] for ln in out.splitlines()])
            got = relattn.relpos_index(**kw)
            self.assertEqual(got.dtype, np.int64)
            self.assertTrue(np.array_equal(got, want), kw)

    def test_swin_2x2(self):
        self.assertEqual(relattn.relpos_index(window=(2, 2)).tolist(),
                         [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]])

    def test_errors(self):
        rc, _, err = cli("index", "--window", "7x7", "--frames", "7", "--kv-frames", "5")
        self.assertEqual(rc, 65)
        with self.assertRaises(relattn.RelattnError) as e:
            relattn.relpos_index(window=7, frames=7, kv_frames=5)
        self.assertEqual(e.exception.status, -1)
        self.assertIn(str(e.exception), err)   # the library's one line, as the CLI prints it
        with self.assertRaises(ValueError):
            relattn.relpos_index(window=7, length=3, clip=1)
        with self.assertRaises(relattn.RelattnError):
            relattn.relpos_index(length=0, clip=1)


class Models(unittest.TestCase):
    def compare(self, sub, model, inp, extra=()):
        """Model.forward/backward against `relattn forward/backward`, name by name."""
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "o.safetensors")
            rc, _, err = cli(sub, model, inp, "-o", out, *extra)
            self.assertEqual(rc, 0, err)
            want, meta = st.read(out)
        inputs, _ = st.read(inp)
        m = relattn.Model(model)
        self.assertEqual(m.arch, meta["arch"])
        got = m.backward(**inputs) if sub == "backward" else m.forward(attn="--attn" in extra,
                                                                       **inputs)
        self.assertEqual(sorted(got), sorted(want), model)
        for k in want:
            self.assertEqual(got[k].shape, want[k].shape, k)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6,
                                       err_msg="%s %s %s" % (sub, model, k))
        return m, got

    def test_layers(self):
        for c in cases("cases.txt"):
            model = os.path.join(FIXTURES, c + ".model.safetensors")
            inp = os.path.join(FIXTURES, c + ".input.safetensors")
            self.compare("forward", model, inp)
            self.compare("forward", model, inp, ["--attn"])
            m, got = self.compare("backward", model, inp)
            # and PyTorch's numbers, which the fixture holds
            exp, _ = st.read(os.path.join(FIXTURES, c + ".expected.safetensors"))
            np.testing.assert_allclose(got["y"], exp["y"], atol=1e-4, rtol=1e-4, err_msg=c)

    def test_networks(self):
        for c in cases("nets.txt"):
            model = os.path.join(FIXTURES, c + ".model.safetensors")
            inp = os.path.join(FIXTURES, c + ".input.safetensors")
            self.compare("forward", model, inp)

    def test_predict_flip(self):
        """Model.predict: the forward's outputs, or with tta = flip their mean
        over the images and their mirror images."""
        model = os.path.join(FIXTURES, "net_swin_timm.model.safetensors")
        x, _ = st.read(os.path.join(FIXTURES, "net_swin_timm.input.safetensors"))
        x = x["x"]
        plain, flip = relattn.Model(model), relattn.Model(model, set={"tta": "flip"})
        a, b = plain.forward(x=x)["y"], plain.forward(x=np.ascontiguousarray(x[..., ::-1]))["y"]
        np.testing.assert_array_equal(plain.predict(x), a)
        np.testing.assert_allclose(flip.predict(x), 0.5 * (a + b), rtol=1e-6, atol=1e-6)
        self.assertGreater(np.abs(a - b).max(), 1e-3)   # the mirror changes the outputs
        with self.assertRaises(relattn.RelattnError):
            relattn.Model(model, set={"tta": "sideways"}).predict(x)

    def test_network_backward(self):
        for c in ["net_block_w4_shift", "net_block_4d_10x6"]:
            model = os.path.join(FIXTURES, c + ".model.safetensors")
            inputs, _ = st.read(os.path.join(FIXTURES, c + ".input.safetensors"))
            y = relattn.Model(model).forward(x=inputs["x"])["y"]
            dy = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
            with tempfile.TemporaryDirectory() as tmp:
                inp = os.path.join(tmp, "in.safetensors")
                st.write(inp, {"x": inputs["x"], "dy": dy})
                m, got = self.compare("backward", model, inp)
            self.assertIn("grad.x", got)
            self.assertTrue(any(k.startswith("grad.layers.") or k.startswith("grad.attn.")
                                for k in got), sorted(got))

    def test_meta(self):
        m = relattn.Model(os.path.join(FIXTURES, "swin_7x7.model.safetensors"))
        self.assertEqual(m.arch, "window_attention")
        self.assertEqual(m.meta["window_size"].replace(" ", ""), "7,7")
        self.assertEqual(m.scheme, "official")

    def test_errors_are_the_cli_messages(self):
        model = os.path.join(FIXTURES, "swin_7x7.model.safetensors")
        m = relattn.Model(model)
        bad = {"x": np.zeros((2, 48, int(m.meta["dim"])), np.float32)}
        with tempfile.TemporaryDirectory() as tmp:
            inp, out = os.path.join(tmp, "in.st"), os.path.join(tmp, "o.st")
            for inputs in [bad, {"x": bad["x"][:, :1], "extra": bad["x"]},
                           {"q": np.zeros((1, 49, 5), np.float32)}]:
                st.write(inp, inputs)
                rc, _, err = cli("forward", model, inp, "-o", out)
                self.assertEqual(rc, 65)
                with self.assertRaises(relattn.RelattnError) as e:
                    m.forward(**inputs)
                self.assertEqual(err.strip(), "relattn forward: " + str(e.exception))
        with self.assertRaises(relattn.RelattnError) as e:
            m.backward(x=np.zeros((1, 49, int(m.meta["dim"])), np.float32))
        self.assertIn("dy", str(e.exception))
        with self.assertRaises(relattn.RelattnError) as e:
            relattn.Model("/nonexistent/model.safetensors")
        self.assertEqual(e.exception.status, -4)
        self.assertIn("/nonexistent/model.safetensors", str(e.exception))

    def test_no_copies(self):
        from relattn import _as_f32
        a = np.zeros((2, 3), np.float32)
        self.assertIs(_as_f32("a", a), a)   # C-contiguous float32: passed as it is
        self.assertIsNot(_as_f32("a", a.T), a.T)
        m = relattn.Model(os.path.join(FIXTURES, "swin_7x7.model.safetensors"))
        x = np.ones((1, 49, int(m.meta["dim"])), np.float32)
        out = m.forward(x=x)
        y = out["y"]
        del out, m   # the output keeps the run's memory alive
        self.assertTrue(np.isfinite(y).all() and y.shape == (1, 49, x.shape[2]))

    def test_float64_and_views_accepted(self):
        m = relattn.Model(os.path.join(FIXTURES, "swin_7x7.model.safetensors"))
        x = np.random.default_rng(1).standard_normal((2, 49, int(m.meta["dim"])))
        a = m.forward(x=x)["y"]
        b = m.forward(x=np.asfortranarray(x.astype(np.float32)))["y"]
        np.testing.assert_array_equal(a, b)


class Library(unittest.TestCase):
    def test_archs_and_version(self):
        rc, out, _ = cli("--list-archs")
        self.assertEqual(rc, 0)
        self.assertEqual(relattn.archs(), out.split())
        rc, out, _ = cli("--version")
        self.assertIn(relattn.__version__, out.splitlines()[0])
        self.assertTrue(relattn.version().startswith("relattn " + relattn.__version__))

    def test_load(self):
        for name in ["swin_7x7.input.safetensors", "index_2d_3x5.safetensors",
                     "net_block_w4.model.safetensors"]:
            path = os.path.join(FIXTURES, name)
            got, meta = relattn.load(path)
            want, wmeta = st.read(path)
            self.assertEqual(meta, wmeta)
            self.assertEqual(sorted(got), sorted(want))
            for k in want:
                np.testing.assert_array_equal(got[k], want[k].astype(got[k].dtype), err_msg=k)
        with self.assertRaises(relattn.RelattnError) as e:
            relattn.load(os.path.join(FIXTURES, "cases.txt"))
        self.assertEqual(e.exception.status, -3)   # RA_ERR_FORMAT

    def test_window_mask(self):
        m = relattn.window_mask((14, 14), (7, 7), (3, 3))
        self.assertEqual(m.shape, (4, 49, 49))
        self.assertTrue(set(np.unique(m)) == {0.0, -100.0})
        self.assertTrue((m[0] == 0).all())   # the top-left window is one region


if __name__ == "__main__":
    unittest.main(verbosity=1)
