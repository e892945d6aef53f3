"""Seed matplotlib's config/cache dir from the image's prebuilt copy.

Loaded at interpreter start-up by sandboxd-mplseed.pth. The sandbox root
filesystem is read-only, so MPLCONFIGDIR points at a tmpfs (/tmp/matplotlib)
that starts out empty; without seeding, every sandbox would rebuild the font
cache on its first `import matplotlib`. Copying the prebuilt cache costs
about a millisecond, once per sandbox. Never raises.
"""
import os

_SEED = "/opt/mplconfig"


def _seed():
    dst = os.environ.get("MPLCONFIGDIR")
    if not dst or os.path.exists(dst) or not os.path.isdir(_SEED):
        return
    # Plain os calls, not shutil (importing shutil costs ~10 ms). The seed is
    # a flat directory of small files (the font cache).
    tmp = "%s.seed-%d" % (dst, os.getpid())
    try:
        os.mkdir(tmp, 0o755)
        for name in os.listdir(_SEED):
            src = os.path.join(_SEED, name)
            if not os.path.isfile(src):
                continue
            with open(src, "rb") as r, open(os.path.join(tmp, name), "wb") as w:
                w.write(r.read())
        os.rename(tmp, dst)  # atomic; loses harmlessly to a concurrent seeder
    except OSError:
        try:
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)
        except OSError:
            pass


try:
    _seed()
except Exception:
    pass
