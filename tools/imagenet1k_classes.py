#!/usr/bin/env python3
"""Write data/imagenet1k_classes.txt from torchvision's _IMAGENET_CATEGORIES
(and, with --kinetics400, data/kinetics400_classes.txt from its
_KINETICS400_CATEGORIES: the classes of its video models).

The list is read from torchvision/models/_meta.py as Python source (ast,
without importing torch or torchvision), so any python3 can run this where
Debian's python3-torchvision is installed:

    python3 tools/imagenet1k_classes.py [META_PY] > data/imagenet1k_classes.txt
    python3 tools/imagenet1k_classes.py --check data/imagenet1k_classes.txt [META_PY]
    python3 tools/imagenet1k_classes.py --kinetics400 [META_PY] > data/kinetics400_classes.txt
    python3 tools/imagenet1k_classes.py --kinetics400 --check data/kinetics400_classes.txt

--check exits 0 when the data file holds exactly the names of META_PY in
order, 1 when it differs, 77 when META_PY is missing (tests skip then).
CMake turns the data files into rai_imagenet1k_labels_json() and
rai_kinetics400_labels_json() (cmake/imagenet1k.cmake)."""
import ast
import os
import sys

META = "/usr/lib/python3/dist-packages/torchvision/models/_meta.py"

HEADER = """\
# {title} class names, one a line, class 0 first.
# Source: torchvision 0.14.1 (Debian python3-torchvision 0.14.1-2),
#   torchvision/models/_meta.py, {var};
#   written by tools/imagenet1k_classes.py{flag}.
# Copyright (c) Soumith Chintala 2016; 2004-2022 Facebook, Inc. and its
#   affiliates. All rights reserved.
# License: BSD-3-Clause:
#   Redistribution and use in source and binary forms, with or without
#   modification, are permitted provided that the following conditions are
#   met:
#   * Redistributions of source code must retain the above copyright notice,
#     this list of conditions and the following disclaimer.
#   * Redistributions in binary form must reproduce the above copyright
#     notice, this list of conditions and the following disclaimer in the
#     documentation and/or other materials provided with the distribution.
#   * Neither the name of the copyright holder nor the names of its
#     contributors may be used to endorse or promote products derived from
#     this software without specific prior written permission.
#   THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS
#   IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED
#   TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A
#   PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT
#   HOLDER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
#   SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED
#   TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR
#   PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF
#   LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING
#   NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
#   SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""


# the lists: (title, variable in _meta.py, count, flag)
LISTS = {"imagenet1k": ("ImageNet-1k (ILSVRC 2012)", "_IMAGENET_CATEGORIES", 1000, ""),
         "kinetics400": ("Kinetics-400", "_KINETICS400_CATEGORIES", 400, " --kinetics400")}


def categories(path, which="imagenet1k"):
    _, var, count, _ = LISTS[which]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == var):
            names = ast.literal_eval(node.value)
            break
    else:
        sys.exit(f"{path}: no {var}")
    # what cmake/imagenet1k.cmake can carry into a C string and a JSON array
    bad = [n for n in names if not n or n != n.strip() or any(c in n for c in '";[]#\\\n')]
    if len(names) != count or len(set(names)) != count or bad:
        sys.exit(f"{path}: expected {count} distinct plain names, got {len(names)} ({bad[:3]})")
    return names


def read_data(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if not l.startswith("#")]


def main(argv):
    which = "imagenet1k"
    if argv[:1] == ["--kinetics400"]:
        which, argv = "kinetics400", argv[1:]
    if argv[:1] == ["--check"]:
        meta = argv[2] if len(argv) > 2 else META
        if not os.path.exists(meta):
            print(f"skip: {meta} is not installed")
            return 77
        want, have = categories(meta, which), read_data(argv[1])
        diff = [i for i in range(max(len(want), len(have)))
                if i >= len(want) or i >= len(have) or want[i] != have[i]]
        print(f"{argv[1]}: {len(have)} names, {len(diff)} differ from {meta}")
        return 1 if diff else 0
    names = categories(argv[0] if argv else META, which)
    title, var, _, flag = LISTS[which]
    sys.stdout.write(HEADER.format(title=title, var=var, flag=flag) + "".join(n + "\n" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
