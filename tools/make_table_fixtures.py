"""Writes tests/fixtures/table_resize_*.safetensors: a random relative
position bias table and what the Swin authors' fine-tuning code makes of it
at another window size (F.interpolate bicubic over each head's grid), and
tests/fixtures/table_resize.txt listing them.

    /usr/bin/python3 tools/fixtures.py table [-o tests/fixtures]
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from common import write_list  # noqa: E402


def write_fixtures(out):
    """The table family of tools/fixtures.py."""
    names = []
    for (w1h, w1w), (w2h, w2w), nh in (((7, 7), (12, 12), 3), ((12, 12), (7, 7), 4),
                                       ((2, 2), (5, 5), 1), ((3, 5), (4, 2), 2),
                                       ((7, 7), (8, 8), 6)):
        torch.manual_seed(w1h * 100 + w2h * 10 + nh)
        s1h, s1w, s2h, s2w = 2 * w1h - 1, 2 * w1w - 1, 2 * w2h - 1, 2 * w2w - 1
        src = torch.randn(s1h * s1w, nh)
        dst = F.interpolate(src.permute(1, 0).reshape(1, nh, s1h, s1w), size=(s2h, s2w),
                            mode="bicubic").reshape(nh, s2h * s2w).permute(1, 0).contiguous()
        name = "table_resize_%dx%d_%dx%d_h%d" % (w1h, w1w, w2h, w2w, nh)
        st.write(os.path.join(out, name + ".safetensors"), {"src": src, "dst": dst},
                 {"from": "%d,%d" % (w1h, w1w), "to": "%d,%d" % (w2h, w2w)})
        names.append(name)
    write_list(out, "table_resize.txt", names)


if __name__ == "__main__":
    import fixtures
    fixtures.script_main({"table": ["table"]})
