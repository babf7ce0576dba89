"""relattn's attention core as a PyTorch op, and Swin's window attention on it.

  attention(q, k, v, *, scale, bias_table=None, index=None, mask=None,
            rel_k=None, rel_v=None, rel=None)
      q (B_, nH, N1, hd), k and v (B_, nH, N2, hd), CPU float32:
        logits[b,h,i,j] = scale * q[b,h,i] . (k[b,h,j] + rel_k[rel[i,j]])
                          + bias_table[index[i,j], h] + mask[b % nW, i, j]
        out[b,h,i] = sum_j softmax_j(logits)[b,h,i,j] * (v[b,h,j] + rel_v[rel[i,j]])
      bias_table (T, nH) with index (N1, N2); mask (nW, N1, N2), B_ % nW == 0;
      rel_k, rel_v (R, hd) with rel (N1, N2) in 0..R-1 (Shaw et al.).
      Differentiable in q, k, v, bias_table, rel_k and rel_v (not in mask).
      A row whose logits are all -inf gives 0, not NaN.

  WindowAttention(dim, window_size, num_heads, qkv_bias=True, qk_scale=None,
                  attn_drop=0., proj_drop=0.)
      the official Swin module (parameters qkv, proj,
      relative_position_bias_table, buffer relative_position_index; loads
      its state_dict), forward(x, mask=None) -> x, computed with the op.

  ShiftedWindowAttention.from_torchvision(m)
      the same for torchvision's swin_t/s/b blocks (forward(x) on
      (B, H, W, C) maps, padding, shift and mask included).

The core reads q, k and v token-major, (B_, N, nH*hd) rows with head h at
columns h*hd: WindowAttention hands it the qkv projection in place; the
(B_, nH, N, hd) form of attention() costs one permutation of each tensor
(and of the gradients) when heads differ (a bias table or a mask), and none
without them (each head is then a window of its own).
"""

import ctypes

try:
    import torch
except ModuleNotFoundError as e:
    if e.name and e.name.partition(".")[0] != "torch":
        raise   # PyTorch is there, something it imports is not: its own error
    raise ModuleNotFoundError(
        "relattn.torch needs PyTorch, which is not installed (Debian: apt install "
        "python3-torch); `import relattn` works without it", name="torch") from e
import torch.nn as nn
import torch.nn.functional as F

from ._lib import AttnDesc, check, lib

__all__ = ["attention", "WindowAttention", "ShiftedWindowAttention"]


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def _rows(t, name):
    """(B_, N, C) with unit column stride and rows ld apart: its ld."""
    if t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("relattn: %s must be a CPU float32 tensor, not %s on %s" %
                        (name, t.dtype, t.device))
    if t.dim() != 3 or t.stride(2) != 1 or t.stride(0) != t.shape[1] * t.stride(1):
        raise ValueError("relattn: %s must be (B_, N, C) rows with unit column stride" % name)
    return t.stride(1)


def _desc(b_, nh, n1, n2, hd, scale, table, idx, mask, rel_k, rel_v, rel):
    d = AttnDesc(b_=b_, nh=nh, n1=n1, n2=n2, hd=hd, scale=float(scale))
    if table is not None:
        d.table, d.idx, d.table_rows = _ptr(table), _ptr(idx), table.shape[0]
    if mask is not None:
        d.mask, d.nw, d.w0 = _ptr(mask), mask.shape[0], 0
    if rel_k is not None or rel_v is not None:
        d.rel_k, d.rel_v, d.rel = _ptr(rel_k), _ptr(rel_v), _ptr(rel)
        d.r = (rel_k if rel_k is not None else rel_v).shape[0]
    return d


def _run_forward(d, out, attn, q, k, v):
    """ra_attention_forward on (pointer, row stride) pairs q, k, v."""
    size = lib.ra_attention_workspace_size(ctypes.byref(d), lib.ra_threads_get())
    work = torch.empty(max(size, 1), dtype=torch.uint8)
    check(lib.ra_attention_forward(_ptr(out), out.shape[-1], _ptr(attn), q[0], q[1], k[0], k[1],
                                   v[0], v[1], ctypes.byref(d), _ptr(work), size))


def _run_backward(d, dq, dk, dv, dtable, drel_k, drel_v, dout, q, k, v):
    """ra_attention_backward; dq, dk, dv, q, k, v are (pointer, row stride)."""
    size = lib.ra_attention_backward_workspace_size(ctypes.byref(d), lib.ra_threads_get())
    work = torch.empty(max(size, 1), dtype=torch.uint8)
    check(lib.ra_attention_backward(dq[0], dq[1], dk[0], dk[1], dv[0], dv[1], _ptr(dtable),
                                    _ptr(drel_k), _ptr(drel_v), _ptr(dout), dout.shape[-1],
                                    q[0], q[1], k[0], k[1], v[0], v[1], ctypes.byref(d),
                                    _ptr(work), size))


def _rows_of(t, name):
    return _ptr(t), _rows(t, name)


def _qkv_rows(qkv, c):
    """q, k, v side by side in the rows of qkv (B_, N, 3C): (pointer, 3C) each."""
    base = qkv.data_ptr()
    return [(ctypes.c_void_p(base + 4 * i * c), 3 * c) for i in range(3)]


def _param_grads(ctx, first, table, rel_k, rel_v):
    need = ctx.needs_input_grad
    return (torch.zeros_like(table) if table is not None and need[first] else None,
            torch.zeros_like(rel_k) if rel_k is not None and need[first + 1] else None,
            torch.zeros_like(rel_v) if rel_v is not None and need[first + 2] else None)


class _Core(torch.autograd.Function):
    """The core on token-major q (B_, N1, C), k, v (B_, N2, C) -> out (B_, N1, C)."""

    @staticmethod
    def forward(ctx, q, k, v, table, rel_k, rel_v, idx, mask, rel, nh, scale):
        b_, n1, c = q.shape
        d = _desc(b_, nh, n1, k.shape[1], c // nh, scale, table, idx, mask, rel_k, rel_v, rel)
        out = torch.empty((b_, n1, c), dtype=torch.float32)
        _run_forward(d, out, None, _rows_of(q, "q"), _rows_of(k, "k"), _rows_of(v, "v"))
        ctx.save_for_backward(q, k, v, table, rel_k, rel_v, idx, mask, rel)
        ctx.nh, ctx.scale = nh, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, table, rel_k, rel_v, idx, mask, rel = ctx.saved_tensors
        b_, n1, c = q.shape
        n2 = k.shape[1]
        d = _desc(b_, ctx.nh, n1, n2, c // ctx.nh, ctx.scale, table, idx, mask, rel_k, rel_v, rel)
        dq = torch.zeros((b_, n1, c), dtype=torch.float32)
        dk = torch.zeros((b_, n2, c), dtype=torch.float32)
        dv = torch.zeros((b_, n2, c), dtype=torch.float32)
        dtable, drel_k, drel_v = _param_grads(ctx, 3, table, rel_k, rel_v)
        _run_backward(d, _rows_of(dq, "dq"), _rows_of(dk, "dk"), _rows_of(dv, "dv"), dtable,
                      drel_k, drel_v, dout.contiguous(), _rows_of(q, "q"), _rows_of(k, "k"),
                      _rows_of(v, "v"))
        return dq, dk, dv, dtable, drel_k, drel_v, None, None, None, None, None


class _CoreQKV(torch.autograd.Function):
    """The core on a fused projection qkv (B_, N, 3C), q, k, v side by side in
    its rows, read in place; its gradient is one (B_, N, 3C) buffer, written
    in place too (no slices to scatter back)."""

    @staticmethod
    def forward(ctx, qkv, table, idx, mask, nh, scale):
        b_, n, c3 = qkv.shape
        c = c3 // 3
        d = _desc(b_, nh, n, n, c // nh, scale, table, idx, mask, None, None, None)
        out = torch.empty((b_, n, c), dtype=torch.float32)
        _run_forward(d, out, None, *_qkv_rows(qkv, c))
        ctx.save_for_backward(qkv, table, idx, mask)
        ctx.nh, ctx.scale = nh, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        qkv, table, idx, mask = ctx.saved_tensors
        b_, n, c3 = qkv.shape
        c = c3 // 3
        d = _desc(b_, ctx.nh, n, n, c // ctx.nh, ctx.scale, table, idx, mask, None, None, None)
        dqkv = torch.zeros_like(qkv)
        dtable = _param_grads(ctx, 1, table, None, None)[0]
        _run_backward(d, *_qkv_rows(dqkv, c), dtable, None, None, dout.contiguous(),
                      *_qkv_rows(qkv, c))
        return dqkv, dtable, None, None, None, None


def _f32(t, name):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("relattn: %s must be a CPU float32 tensor" % name)
    return t.contiguous()


def _i32(t, name, shape):
    if t is None:
        return None
    t = torch.as_tensor(t)
    if t.dtype.is_floating_point or t.dtype.is_complex or tuple(t.shape) != shape:
        raise ValueError("relattn: %s must be an integer tensor of shape %s" % (name, shape))
    return t.to(torch.int32).contiguous()


def _check_args(b_, nh, n1, n2, hd, bias_table, index, mask, rel_k, rel_v, rel):
    if (bias_table is None) != (index is None):
        raise ValueError("relattn: bias_table and index go together")
    if bias_table is not None and (bias_table.dim() != 2 or bias_table.shape[1] != nh):
        raise ValueError("relattn: bias_table must be (T, nH=%d), not %s" %
                         (nh, tuple(bias_table.shape)))
    if mask is not None and (mask.dim() != 3 or tuple(mask.shape[1:]) != (n1, n2) or
                             b_ % mask.shape[0]):
        raise ValueError("relattn: mask must be (nW, %d, %d) with B_=%d a multiple of nW, not %s"
                         % (n1, n2, b_, tuple(mask.shape)))
    if (rel_k is not None or rel_v is not None) != (rel is not None):
        raise ValueError("relattn: rel_k / rel_v and rel go together")
    for t, name in ((rel_k, "rel_k"), (rel_v, "rel_v")):
        if t is not None and (t.dim() != 2 or t.shape[1] != hd):
            raise ValueError("relattn: %s must be (R, hd=%d), not %s" % (name, hd, tuple(t.shape)))
    if rel_k is not None and rel_v is not None and rel_k.shape[0] != rel_v.shape[0]:
        raise ValueError("relattn: rel_k and rel_v must have the same rows")


def _tokens(q, k, v, nh, scale, bias_table, index, mask, rel_k, rel_v, rel):
    """The op on token-major q (B_, N1, C), k, v (B_, N2, C): out (B_, N1, C)."""
    b_, n1, c = q.shape
    n2 = k.shape[1]
    hd = c // nh
    bias_table, mask, rel_k, rel_v = (_f32(bias_table, "bias_table"), _f32(mask, "mask"),
                                      _f32(rel_k, "rel_k"), _f32(rel_v, "rel_v"))
    _check_args(b_, nh, n1, n2, hd, bias_table, index, mask, rel_k, rel_v, rel)
    idx = _i32(index, "index", (n1, n2))
    rel = _i32(rel, "rel", (n1, n2))
    q, k, v = (_token_rows(t) for t in (q, k, v))
    return _Core.apply(q, k, v, bias_table, rel_k, rel_v, idx, mask, rel, nh, float(scale))


def _window_core(qkv, nh, scale, table, idx32, mask):
    """Window attention on a fused qkv (B_, N, 3C) with a bias table (T, nH),
    its int32 index (N, N) and a mask (nW, N, N) or None: out (B_, N, C)."""
    if qkv.dtype != torch.float32 or qkv.device.type != "cpu":
        raise TypeError("relattn: the qkv projection must be CPU float32, not %s" % qkv.dtype)
    b_, n, c3 = qkv.shape
    table = _f32(table, "relative_position_bias_table")
    if mask is not None:
        mask = mask.to(torch.float32).contiguous()
    _check_args(b_, nh, n, n, c3 // 3 // nh, table, idx32, mask, None, None, None)
    return _CoreQKV.apply(qkv, table, idx32, mask, nh, float(scale))


def _token_rows(t):
    """t itself when the core can read it in place (rows with unit column
    stride, like slices of a fused qkv), else a contiguous copy."""
    if t.dim() == 3 and t.stride(2) == 1 and t.stride(1) >= t.shape[2] and \
            t.stride(0) == t.shape[1] * t.stride(1):
        return t
    return t.contiguous()


def attention(q, k, v, *, scale, bias_table=None, index=None, mask=None, rel_k=None, rel_v=None,
              rel=None):
    """Attention with relative positions on (B_, nH, N, hd) tensors (module docstring)."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError("relattn: %s must be a (B_, nH, N, hd) tensor" % name)
        if t.dtype != torch.float32 or t.device.type != "cpu":
            raise TypeError("relattn: %s must be a CPU float32 tensor, not %s on %s" %
                            (name, t.dtype, t.device))
    b_, nh, n1, hd = q.shape
    if k.shape[0] != b_ or k.shape[1] != nh or k.shape[3] != hd or tuple(v.shape) != tuple(k.shape):
        raise ValueError("relattn: q %s, k %s, v %s do not fit (B_, nH, N, hd)" %
                         (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if bias_table is None and mask is None:
        # nothing differs between heads: each (window, head) is a window of
        # one head, and (B_*nH, N, hd) is the core's layout as it is
        out = _tokens(*(t.reshape(b_ * nh, t.shape[2], hd) for t in (q, k, v)), 1, scale,
                      None, None, None, rel_k, rel_v, rel)
        return out.view(b_, nh, n1, hd)
    # (B_, nH, N, hd) -> token-major (B_, N, nH*hd), the core's layout
    qt, kt, vt = (t.transpose(1, 2).reshape(t.shape[0], t.shape[2], nh * hd) for t in (q, k, v))
    out = _tokens(qt, kt, vt, nh, scale, bias_table, index, mask, rel_k, rel_v, rel)
    return out.view(b_, n1, nh, hd).transpose(1, 2)


def _relative_position_index(wh, ww):
    return torch.from_numpy(_relpos_index_2d(wh, ww))


def _relpos_index_2d(wh, ww):
    from . import relpos_index
    return relpos_index(window=(wh, ww))


class WindowAttention(nn.Module):
    """Swin's W-MSA / SW-MSA module with the official names and arguments,
    computed by relattn's core: forward(x (B_, N, C), mask (nW, N, N) or
    None) -> (B_, N, C). With return_attn=True it returns (x, attn) as the
    reference module of tools/common.py does (attn computed by the core, without gradient).
    Dropout on the probabilities (attn_drop > 0) is not supported in
    training mode."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None, attn_drop=0.,
                 proj_drop=0., return_attn=False):
        super().__init__()
        if isinstance(window_size, int):
            window_size = (window_size, window_size)
        self.dim, self.window_size, self.num_heads = dim, tuple(window_size), num_heads
        if dim % num_heads:
            raise ValueError("relattn: dim %d is not a multiple of num_heads %d" % (dim, num_heads))
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        self.register_buffer("relative_position_index", _relative_position_index(wh, ww))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop_p = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.return_attn = return_attn
        nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)
        self._idx32 = None

    @classmethod
    def from_module(cls, m, **kw):
        """A copy of another WindowAttention (official, tools/common.py's, timm's)."""
        new = cls(m.dim, m.window_size, m.num_heads, qkv_bias=m.qkv.bias is not None, **kw)
        new.scale = m.scale
        new.load_state_dict(m.state_dict(), strict=False)
        return new

    def _index(self):
        idx = self.relative_position_index
        if self._idx32 is None or self._idx32[0] is not idx:
            self._idx32 = (idx, idx.to(torch.int32).contiguous())
        return self._idx32[1]

    def forward(self, x, mask=None):
        if self.training and self.attn_drop_p > 0:
            raise NotImplementedError("relattn: attention dropout in training mode")
        b_, n, c = x.shape
        qkv = self.qkv(x).contiguous()   # (B_, N, 3C): q, k, v side by side, used in place
        out = _window_core(qkv, self.num_heads, self.scale, self.relative_position_bias_table,
                           self._index(), mask)
        y = self.proj_drop(self.proj(out))
        if not self.return_attn:
            return y
        return y, self._probabilities(qkv.detach(), mask)

    def _probabilities(self, qkv, mask):
        b_, n, c3 = qkv.shape
        c = c3 // 3
        d = _desc(b_, self.num_heads, n, n, c // self.num_heads, self.scale,
                  self.relative_position_bias_table.detach().contiguous(), self._index(), mask,
                  None, None, None)
        attn = torch.empty((b_, self.num_heads, n, n))
        _run_forward(d, torch.empty((b_, n, c)), attn, *_qkv_rows(qkv.contiguous(), c))
        return attn


class ShiftedWindowAttention(nn.Module):
    """torchvision's ShiftedWindowAttention (swin_t, swin_s, swin_b), the same
    parameters and buffer, computed by relattn's core: forward(x (B, H, W, C))
    pads to multiples of the window, shifts, attends within windows with the
    shifted-window mask, and undoes it all, as torchvision does (a shift is
    dropped on an axis whose padded size the window covers).
    ShiftedWindowAttention.from_torchvision(m) copies a torchvision module."""

    def __init__(self, dim, window_size, shift_size, num_heads, qkv_bias=True, proj_bias=True,
                 attention_dropout=0.0, dropout=0.0):
        super().__init__()
        self.window_size, self.shift_size = list(window_size), list(shift_size)
        self.num_heads, self.dropout = num_heads, dropout
        self.attention_dropout = attention_dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        self.register_buffer("relative_position_index", _relative_position_index(wh, ww).view(-1))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self._idx32 = None
        self._masks = {}

    @classmethod
    def from_torchvision(cls, m):
        dim = m.qkv.in_features
        new = cls(dim, m.window_size, m.shift_size, m.num_heads, qkv_bias=m.qkv.bias is not None,
                  proj_bias=m.proj.bias is not None, attention_dropout=m.attention_dropout,
                  dropout=m.dropout)
        new.load_state_dict(m.state_dict())
        return new

    def _index(self):
        idx = self.relative_position_index
        if self._idx32 is None or self._idx32[0] is not idx:
            n = self.window_size[0] * self.window_size[1]
            self._idx32 = (idx, idx.view(n, n).to(torch.int32).contiguous())
        return self._idx32[1]

    def _mask(self, hp, wp, sh, sw):
        key = (hp, wp, sh, sw)
        if key not in self._masks:
            from . import window_mask
            self._masks[key] = torch.from_numpy(
                window_mask((hp, wp), tuple(self.window_size), (sh, sw)))
        return self._masks[key]

    def forward(self, x):
        if self.training and self.attention_dropout > 0:
            raise NotImplementedError("relattn: attention dropout in training mode")
        b, h, w, c = x.shape
        wh, ww = self.window_size
        x = F.pad(x, (0, 0, 0, (ww - w % ww) % ww, 0, (wh - h % wh) % wh))
        hp, wp = x.shape[1], x.shape[2]
        sh = 0 if wh >= hp else self.shift_size[0]
        sw = 0 if ww >= wp else self.shift_size[1]
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        nwh, nww = hp // wh, wp // ww
        x = x.view(b, nwh, wh, nww, ww, c).permute(0, 1, 3, 2, 4, 5).reshape(b * nwh * nww,
                                                                            wh * ww, c)
        mask = self._mask(hp, wp, sh, sw) if sh or sw else None
        x = _window_core(self.qkv(x).contiguous(), self.num_heads, (c // self.num_heads) ** -0.5,
                         self.relative_position_bias_table, self._index(), mask)
        x = F.dropout(self.proj(x), p=self.dropout, training=self.training)
        x = x.view(b, nwh, nww, wh, ww, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        if sh or sw:
            x = torch.roll(x, shifts=(sh, sw), dims=(1, 2))
        return x[:, :h, :w, :].contiguous()
