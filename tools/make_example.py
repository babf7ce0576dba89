"""Writes the example of the README's main command (examples/):

  swin_window_7x7.safetensors    a Swin-T stage-1 window attention (dim 96,
                                 3 heads, 7x7 window) whose bias table
                                 prefers nearby tokens, as trained tables do
  swin_windows_input.safetensors x: a 14x14 feature map of 2 images, shifted
                                 by 3 and cut into 8 windows; mask: the
                                 shifted-window mask (4, 49, 49)

Run with Debian's torch:  /usr/bin/python3 tools/fixtures.py example
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from common import WindowAttention, make_windows, shift_mask_2d  # noqa: E402


def write_fixtures(out):
    """The example family of tools/fixtures.py (home: examples/)."""
    torch.manual_seed(2021)
    dim, heads, ws, shift = 96, 3, 7, 3
    m = WindowAttention(dim, (ws, ws), heads)
    with torch.no_grad():
        for p in (m.qkv.weight, m.proj.weight):
            p.normal_(0, 0.02)
        m.qkv.bias.zero_()
        m.proj.bias.zero_()
        # bias falls with distance, at a different rate per head
        dy = torch.arange(2 * ws - 1).view(-1, 1) - (ws - 1)
        dx = torch.arange(2 * ws - 1).view(1, -1) - (ws - 1)
        dist = (dy.abs() + dx.abs()).float().view(-1, 1)
        m.relative_position_bias_table.copy_(-dist * torch.tensor([[0.3, 1.0, 3.0]]))
    meta = {"arch": "window_attention", "dim": str(dim), "window_size": "%d,%d" % (ws, ws),
            "num_heads": str(heads), "qkv_bias": "true"}
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    st.write(os.path.join(out, "swin_window_7x7.safetensors"), sd, meta)

    x = torch.randn(2, 1, 14, 14, dim)
    windows = make_windows(x, 1, ws, ws, 0, shift, shift)
    mask = shift_mask_2d(14, 14, ws, ws, shift, shift)
    st.write(os.path.join(out, "swin_windows_input.safetensors"),
             {"x": windows.contiguous(), "mask": mask.contiguous()})


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"example": ["example"]})
