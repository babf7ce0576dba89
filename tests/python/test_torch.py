"""relattn.torch against PyTorch: the op equals the naive expression forward
and backward (autograd, float32), and the modules swapped into a Swin give
the Swin's outputs and gradients. Run by tests/test_python.sh."""

import os
import sys
import json
import unittest

import numpy as np
import torch
import torch.nn as nn

import relattn
import relattn.torch as rt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "tools"))


def naive(q, k, v, scale, bias_table=None, index=None, mask=None, rel_k=None, rel_v=None,
          rel=None):
    """The expression the op computes, as PyTorch code would write it."""
    b_, nh, n1, hd = q.shape
    n2 = k.shape[2]
    logits = (q * scale) @ k.transpose(-2, -1)
    if rel_k is not None:
        logits = logits + scale * torch.einsum("bhid,ijd->bhij", q, rel_k[rel.long()])
    if bias_table is not None:
        bias = bias_table[index.reshape(-1).long()].view(n1, n2, nh).permute(2, 0, 1)
        logits = logits + bias.unsqueeze(0)
    if mask is not None:
        nw = mask.shape[0]
        logits = (logits.view(b_ // nw, nw, nh, n1, n2) + mask.unsqueeze(1).unsqueeze(0)).view(
            b_, nh, n1, n2)
    p = logits.softmax(-1)
    out = p @ v
    if rel_v is not None:
        out = out + torch.einsum("bhij,ijd->bhid", p, rel_v[rel.long()])
    return out


def close(test, got, want, what, tol=1e-5):
    scale = max(want.abs().max().item(), 1e-3)
    err = (got - want).abs().max().item()
    test.assertLessEqual(err, tol * scale, "%s: max error %.3g at scale %.3g" % (what, err, scale))


def case(b_=4, nh=3, n1=17, n2=None, hd=8, table_rows=0, nw=0, r=0, rel_k=True, rel_v=True,
         seed=0):
    g = torch.Generator().manual_seed(seed)
    n2 = n2 or n1
    t = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    a = dict(q=t(b_, nh, n1, hd), k=t(b_, nh, n2, hd), v=t(b_, nh, n2, hd), scale=hd ** -0.5)
    if table_rows:
        a["bias_table"] = t(table_rows, nh)
        a["index"] = torch.randint(0, table_rows, (n1, n2), generator=g)
    if nw:
        m = torch.where(torch.rand(nw, n1, n2, generator=g) < 0.3, -100.0, 0.0)
        a["mask"] = m + 0.5 * t(nw, n1, n2)
    if r:
        a["rel"] = torch.randint(0, r, (n1, n2), generator=g)
        if rel_k:
            a["rel_k"] = t(r, hd)
        if rel_v:
            a["rel_v"] = t(r, hd)
    return a


DIFF = ("q", "k", "v", "bias_table", "rel_k", "rel_v")


class Op(unittest.TestCase):
    def check(self, a, what):
        mine = {k: (v.clone().requires_grad_(True) if k in DIFF else v) for k, v in a.items()}
        ref = {k: (v.clone().requires_grad_(True) if k in DIFF else v) for k, v in a.items()}
        out = rt.attention(**mine)
        want = naive(**ref)
        close(self, out.detach(), want.detach(), what + ": forward")
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
        out.backward(dout)
        want.backward(dout)
        for k in DIFF:
            if k in a:
                close(self, mine[k].grad, ref[k].grad, "%s: grad %s" % (what, k), 1e-4)

    def test_plain(self):
        self.check(case(), "plain")
        self.check(case(b_=2, nh=1, n1=1, hd=4), "one token")
        self.check(case(b_=3, nh=4, n1=64, hd=16, seed=3), "64 tokens")

    def test_swin_window(self):
        a = case(b_=8, nh=3, n1=49, hd=32, table_rows=169, nw=4)
        a["index"] = torch.from_numpy(relattn.relpos_index(window=(7, 7)))
        self.check(a, "swin 7x7 shifted")

    def test_cross_frames(self):
        a = case(b_=2, nh=2, n1=28, n2=16, hd=8, table_rows=13 * 3 * 3)
        a["index"] = torch.from_numpy(relattn.relpos_index(window=(2, 2), frames=7, kv_frames=4))
        self.check(a, "rstt cross 7 -> 4 frames")
        self.check(case(b_=2, nh=2, n1=5, n2=11, hd=8, nw=2), "cross with a mask")

    def test_shaw(self):
        a = case(b_=2, nh=4, n1=20, hd=8, r=7)
        a["rel"] = torch.from_numpy(relattn.relpos_index(length=20, clip=3))
        self.check(a, "shaw both")
        self.check(case(b_=2, nh=2, n1=9, hd=8, r=5, rel_v=False), "shaw keys only")
        self.check(case(b_=2, nh=2, n1=9, hd=8, r=5, rel_k=False), "shaw values only")
        self.check(case(b_=4, nh=2, n1=12, n2=10, hd=8, r=5, table_rows=9, nw=2), "everything")

    def test_non_contiguous_inputs(self):
        a = case(b_=2, nh=3, n1=10, hd=8)
        a["q"] = a["q"].transpose(2, 3).contiguous().transpose(2, 3)
        self.check(a, "transposed q")

    def test_masked_row_is_zero(self):
        a = case(b_=2, nh=1, n1=3, hd=4, nw=1)
        a["mask"][0, 1, :] = float("-inf")
        out = rt.attention(**a)
        self.assertTrue(torch.isfinite(out).all())
        self.assertTrue((out[:, :, 1] == 0).all())

    def test_errors(self):
        a = case(b_=2, nh=2, n1=5, hd=4, table_rows=9)
        with self.assertRaises(TypeError):
            rt.attention(**dict(a, q=a["q"].double()))
        with self.assertRaises(ValueError):
            rt.attention(**dict(a, index=a["index"][:4]))
        with self.assertRaises(relattn.RelattnError) as e:
            rt.attention(**dict(a, index=a["index"] + 9))
        self.assertIn("outside", str(e.exception))
        with self.assertRaises(ValueError):
            rt.attention(**dict(case(b_=3, nh=2, n1=5, hd=4, nw=2)))

    def test_no_grad_for_what_is_frozen(self):
        a = case(b_=2, nh=2, n1=5, hd=4, table_rows=9)
        q = a["q"].clone().requires_grad_(True)
        out = rt.attention(**dict(a, q=q))
        out.sum().backward()
        self.assertIsNotNone(q.grad)
        self.assertIsNone(a["bias_table"].grad)


def load_same(dst, src):
    dst.load_state_dict(src.state_dict())
    return dst


class Modules(unittest.TestCase):
    def test_window_attention_equals_the_seeds_module(self):
        from make_fixtures import WindowAttention as Seed
        torch.manual_seed(0)
        seed = Seed(48, (7, 7), 3)
        mine = rt.WindowAttention(48, (7, 7), 3, return_attn=True)
        mine.load_state_dict(seed.state_dict())
        x = torch.randn(8, 49, 48)
        mask = torch.from_numpy(relattn.window_mask((14, 14), 7, 3))
        for m in (None, mask):
            x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
            (y1, a1), (y2, a2) = mine(x1, mask=m), seed(x2, mask=m)
            close(self, y1.detach(), y2.detach(), "y")
            close(self, a1, a2.detach(), "attn")
            dy = torch.randn(y1.shape)
            mine.zero_grad(), seed.zero_grad()
            y1.backward(dy), y2.backward(dy)
            close(self, x1.grad, x2.grad, "grad x", 1e-4)
            for (n, p1), (_, p2) in zip(mine.named_parameters(), seed.named_parameters()):
                close(self, p1.grad, p2.grad, "grad " + n, 1e-4)
        plain = rt.WindowAttention(48, 7, 3)
        plain.load_state_dict(seed.state_dict())
        close(self, plain(x).detach(), seed(x)[0].detach(), "without attn")

    def same_network(self, mine, ref, x):
        """The same logits and parameter gradients (of a random linear loss)."""
        y1, y2 = mine(x), ref(x)
        close(self, y1.detach(), y2.detach(), "logits", 1e-5)
        w = torch.randn(y1.shape)
        (y1 * w).sum().backward()
        (y2 * w).sum().backward()
        for (n1, p1), (n2, p2) in zip(mine.named_parameters(), ref.named_parameters()):
            self.assertEqual(n1, n2)
            close(self, p1.grad, p2.grad, "grad " + n1, 1e-4)

    def test_swapped_into_a_swin(self):
        """Every block of an official-style Swin (tools/swin_twin.py) on
        relattn's WindowAttention: the same logits and gradients."""
        from swin_twin import SwinTransformer
        torch.manual_seed(0)
        ref = SwinTransformer(img_size=28, patch_size=2, in_chans=1, num_classes=10, embed_dim=24,
                              depths=(2, 2), num_heads=(2, 4), window_size=7)
        for p in ref.parameters():   # weights far from the initialisation
            p.data.add_(0.1 * torch.randn(p.shape))
        mine = SwinTransformer(img_size=28, patch_size=2, in_chans=1, num_classes=10,
                               embed_dim=24, depths=(2, 2), num_heads=(2, 4), window_size=7)
        mine.load_state_dict(ref.state_dict())
        n = 0
        for layer in mine.layers:
            for blk in layer.blocks:
                blk.attn = rt.WindowAttention.from_module(blk.attn, return_attn=True)
                n += 1
        self.assertEqual(n, 4)
        self.assertEqual(sorted(mine.state_dict()), sorted(ref.state_dict()))
        self.same_network(mine, ref, torch.randn(3, 1, 28, 28))

    def test_swapped_into_torchvision(self):
        try:
            from torchvision.models import swin_transformer as tv
        except ImportError:
            self.skipTest("torchvision is not installed")
        torch.manual_seed(0)
        ref = tv.SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 4],
                                 window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)
        for p in ref.parameters():
            p.data.add_(0.1 * torch.randn(p.shape))
        mine = tv.SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2],
                                  num_heads=[2, 4], window_size=[4, 4],
                                  stochastic_depth_prob=0.0, num_classes=10)
        mine.load_state_dict(ref.state_dict())
        n = 0
        for mod in mine.modules():
            if isinstance(getattr(mod, "attn", None), tv.ShiftedWindowAttention):
                mod.attn = rt.ShiftedWindowAttention.from_torchvision(mod.attn)
                n += 1
        self.assertEqual(n, 4)
        self.assertEqual(sorted(mine.state_dict()), sorted(ref.state_dict()))
        ref.eval(), mine.eval()
        # 10 x 11 tokens: padded to 12 x 12, shifted by 2
        self.same_network(mine, ref, torch.randn(2, 3, 40, 44))


class Checkpoints(unittest.TestCase):
    def test_model_opens_what_torch_saves(self):
        """relattn.Model on torch.save's .pth (a nested, DataParallel-named
        state_dict) and on a plain state_dict, with key and set: the
        logits of the same Swin in PyTorch."""
        import tempfile
        from swin_twin import SwinTransformer
        torch.manual_seed(1)
        ref = SwinTransformer(img_size=28, patch_size=2, in_chans=1, num_classes=10, embed_dim=24,
                              depths=(2, 2), num_heads=(2, 4), window_size=7).eval()
        for p in ref.parameters():
            p.data.add_(0.1 * torch.randn(p.shape))
        sd = {"module." + k: v for k, v in ref.state_dict().items()}
        x = torch.randn(2, 1, 28, 28)
        with torch.no_grad():
            want = ref(x)
        with tempfile.TemporaryDirectory() as d:
            path = d + "/ckpt.pth"
            torch.save({"epoch": 3, "student": sd, "teacher": dict(sd)}, path)
            m = relattn.Model(path, key="student")
            self.assertEqual((m.arch, m.meta["embed_dim"], m.meta["depths"]), ("swin", "24", "2,2"))
            self.assertEqual(m.meta["relattn.source.state_dict"], "student")
            close(self, torch.from_numpy(m.forward(x=x.numpy())["y"]), want, "logits of a .pth")
            with self.assertRaises(relattn.RelattnError) as e:
                relattn.Model(path)   # two state dicts, neither named as usual: asks which
            self.assertIn("--key", str(e.exception))
            mb = relattn.Model(path, key="student", precision="bf16")
            self.assertEqual(mb.precision, "bf16")
            yb = torch.from_numpy(mb.forward(x=x.numpy())["y"])
            rel = float((yb - want).norm() / want.norm())
            self.assertTrue(1e-5 < rel < 3e-2, "bf16 moved the logits by %g" % rel)
            with self.assertRaises(ValueError):
                relattn.Model(path, key="student", precision="fp16")
            m = relattn.Model(path, key="teacher", set={"labels": json.dumps([str(i) for i in range(10)])})
            self.assertEqual(json.loads(m.meta["labels"])[3], "3")


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main(verbosity=1)
