"""Fine-tuning at 224 x 224, batch 32: relattn train --init against PyTorch,
images/s of the training step and the peak resident memory of the process.

relattn: `relattn train --init MODEL.pth` of torchvision's swin_t and
vit_b_16 (random weights, a head of 3 classes) on a folder of 224 x 224
PNGs (--augment none: the loader decodes and normalises each image, on the
same cores), --batch 32, --precision fp32 and bf16, --threads 2; images/s
is STEPS x 32 over the training seconds (`--json`) of a run of 1 + STEPS
steps less those of a run of 1 (the first step allocates the tapes), the
peak RSS the larger process's.
PyTorch (torch 1.13, Debian): the torchvision model in training mode,
torch.optim.AdamW, cross entropy, batch 32 of tensors already in memory,
at 1 and 2 threads, fp32 and bf16 autocast (torch.autocast("cpu")), the
median step time of STEPS steps after a first one; its peak RSS that of a
process running only that configuration.

  RELATTN_BINARY=build/relattn /usr/bin/python3 bench/finetune.py [STEPS]
prints CSV: who,model,precision,threads,images_per_s,peak_rss_mib."""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
B = 32
relattn_bin = os.environ.get("RELATTN_BINARY", "build/relattn")


def torch_child(builder, precision, threads):
    """One PyTorch configuration in this process: the median step time."""
    import torch
    import torchvision
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, builder)(num_classes=3)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    x = torch.randn(B, 3, 224, 224)
    y = torch.randint(0, 3, (B,))
    times = []
    for i in range(STEPS + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"ips": B / statistics.median(times), "rss": rss}))


def folder(root):
    from PIL import Image
    photos = "/usr/lib/python3/dist-packages/skimage/data/"
    names = ["astronaut.png", "chelsea.png", "coffee.png"]
    for c, name in enumerate(names):
        d = os.path.join(root, "train", "c%d" % c)
        os.makedirs(d)
        im = Image.open(photos + name).convert("RGB").resize((224, 224), Image.BICUBIC)
        for i in range(B * (STEPS + 1) // 3 + 1):
            im.rotate(i % 7).save(os.path.join(d, "%d.png" % i))
        os.makedirs(os.path.join(root, "val", "c%d" % c))
        im.save(os.path.join(root, "val", "c%d" % c, "0.png"))


def main():
    if len(sys.argv) > 2 and sys.argv[2] == "--torch-child":
        return torch_child(sys.argv[3], sys.argv[4], int(sys.argv[5]))
    import torch
    import torchvision
    tmp = tempfile.mkdtemp(prefix="relattn_bench_finetune.")
    folder(os.path.join(tmp, "data"))
    print("who,model,precision,threads,images_per_s,peak_rss_mib")
    for builder in ("swin_t", "vit_b_16"):
        torch.manual_seed(0)
        pth = os.path.join(tmp, builder + ".pth")
        torch.save(getattr(torchvision.models, builder)(num_classes=3).state_dict(), pth)
        for precision in ("fp32", "bf16"):
            ck = os.path.join(tmp, "ck.st")
            secs, rss = [], 0
            for steps in (1, STEPS + 1):   # the steps after the first: the difference
                r = subprocess.run(
                    ["/usr/bin/time", "-f", "RSS %M", relattn_bin, "train", "--init", pth,
                     "--data", os.path.join(tmp, "data"), "--out", ck, "--batch", str(B),
                     "--max-steps", str(steps), "--epochs", "1", "--augment", "none",
                     "--precision", precision, "--threads", "2", "--json", "--ckpt-every",
                     "1000000"], capture_output=True, text=True)
                if r.returncode:
                    sys.exit("relattn %s %s: %s" % (builder, precision, r.stderr[-500:]))
                secs.append(json.loads(r.stdout.strip().split("\n")[-1])["train_seconds"])
                rss = max(rss, int(r.stderr.strip().split("RSS ")[-1]) / 1024)
            print("relattn,%s,%s,2,%.2f,%.0f" % (builder, precision,
                                                 STEPS * B / (secs[1] - secs[0]), rss), flush=True)
        for precision in ("fp32", "bf16"):
            for threads in (1, 2):
                r = subprocess.run([sys.executable, __file__, str(STEPS), "--torch-child",
                                    builder, precision, str(threads)],
                                   capture_output=True, text=True)
                if r.returncode:   # torch 1.13's autocast fails in torchvision's Swin
                    why = r.stderr.strip().split("\n")[-1][:80].replace(",", ";")
                    print("pytorch,%s,%s,%d,n/a (%s),n/a" % (builder, precision, threads, why),
                          flush=True)
                    continue
                v = json.loads(r.stdout.strip().split("\n")[-1])
                print("pytorch,%s,%s,%d,%.2f,%.0f" % (builder, precision, threads, v["ips"],
                                                      v["rss"]), flush=True)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
