"""checks.py - what the Python tests share: counting their checks, and
skipping (exit 77, as ctest's SKIP_RETURN_CODE) without what they need.

    from checks import check, done, need_photos
    need_photos(["astronaut.png", ...])   # python3-skimage's data folder
    check(ok, "what went wrong")          # counted; a failure printed
    done("test_x")                        # the counts; exit 1 on a failure"""
import os
import sys

PHOTOS = "/usr/lib/python3/dist-packages/skimage/data"
passed = failed = 0


def check(ok, what):
    global failed, passed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def skip(why):
    print("skipped: %s" % why)
    sys.exit(77)


def need_photos(names):
    if not all(os.path.exists(os.path.join(PHOTOS, n)) for n in names):
        skip("no photos in %s (Debian's python3-skimage)" % PHOTOS)


def done(name):
    print("%s: %d checks passed, %d failed" % (name, passed, failed))
    sys.exit(1 if failed else 0)
