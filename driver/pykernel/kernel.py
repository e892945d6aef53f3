"""Tiny notebook-style Python kernel for the sandbox driver.

Started by the Go driver as ``python3 -u kernel.py`` with fd 0 = /dev/null,
fd 1/2 = the user's raw stdout/stderr pipes, fd 3 = control in (first a
hello {"nonce"}, then one JSON request per line: {"id","code"} and optional
"env", variables set for that request only, and "setenv", variables set for
good before it: the sandbox's environment), fd 4 =
control out (one JSON message per line: ready / display / result / error /
done).  Before every message that carries "sync": N, the marker
b"\\x00\\x1eSBX-SYNC:<nonce>:<N>\\x1e\\x00" is written to the stdout and stderr
pipes, so the driver can order output against messages.  The nonce is a
secret of this kernel (never in the environment), so marker-like bytes in
user output are just text to the driver.

Standard library only; nothing heavy (numpy, matplotlib, pandas, PIL, plotly,
IPython) is ever imported unless user code imported it first: an idle kernel
must stay ~10 MB and a trivial command must cost well under 1 ms.
"""
import os
import signal
import sys

_executing = False   # SIGINT raises KeyboardInterrupt only while this is True
_critical = False    # main thread is writing a message: defer the interrupt
_pending = False     # an interrupt arrived during a critical section


def _on_sigint(signum, frame):
    # Idle (reading requests, sending messages) -> ignore, so a late SIGINT
    # can never kill the kernel or cut a control message in half.
    global _pending
    if _executing:
        if _critical:
            _pending = True
        else:
            raise KeyboardInterrupt


# Installed before the remaining imports so an early SIGINT cannot kill us.
signal.signal(signal.SIGINT, _on_sigint)

import _signal
import _thread
import ast
import base64
import builtins
import io
import json
import linecache
import traceback
import types

_CTL_IN, _CTL_OUT = 3, 4
# Private, close-on-exec duplicates of the output pipes for the sync markers:
# they keep working (and keep their order relative to user output, which is
# the same pipe) even if the user closes or redirects fd 1/2.  Kept also to
# repair fd 1/2 between commands.
_OUT1, _OUT2 = os.dup(1), os.dup(2)
# Children (os.system, ...) must not inherit the control pipes; a lingering
# grandchild holding fd 4 open would hide the kernel's death from the driver.
for _fd in (_CTL_IN, _CTL_OUT):
    os.set_inheritable(_fd, False)

_KFILE = _on_sigint.__code__.co_filename
_child = False               # set in children forked by user code
_MAIN = _thread.get_ident()
_lock = _thread.RLock()      # RLock: a user stream's flush() may call display()
_sync = 0                    # kernel-lifetime sync counter
_NONCE = b""                 # marker nonce, from the driver's hello
_cur_id = None               # id of the running request; None while idle
_deferred = []               # markers and lines of deferred messages, in turn
_cell = 0
_keep_src = False            # keep this cell's source in linecache?
_loop = None                 # asyncio loop for top-level await, created lazily
_plotly_png_ok = True        # cached: kaleido missing -> never retry to_image
_enc = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_MAX_PLAIN = 1 << 20
_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_CO_COROUTINE = 0x80

# The user's namespace is a real module installed as __main__, so pickle,
# multiprocessing and `import __main__` find the user's classes, not ours.
_KMOD = sys.modules["__main__"]      # keeps the kernel's own module alive
_umod = types.ModuleType("__main__")
_umod.__builtins__ = builtins
_ns = _umod.__dict__
_FRESH_NS = dict(_ns)        # what a fresh namespace holds (_adopt restores it)
sys.modules["__main__"] = _umod
sys.argv = [""]
if sys.path and sys.path[0] == os.path.dirname(_KFILE):
    sys.path[0] = ""         # imports resolve from the cwd, like a notebook


def _fix_stream(s):
    # Lone surrogates must not crash print(); the driver maps bad bytes itself.
    try:
        s.reconfigure(errors="backslashreplace")
    except Exception:
        pass
    return s


_orig_out = _fix_stream(sys.stdout)
_orig_err = _fix_stream(sys.stderr)


def _write_all(fd, b):
    mv = memoryview(b)
    while mv:                # os.write may be partial (signal, huge line)
        mv = mv[os.write(fd, mv):]


def _flush_std():
    for s in (getattr(sys, "stdout", None), getattr(sys, "stderr", None), _orig_out, _orig_err):
        try:
            s.flush()
        except Exception:    # user replaced/closed/deleted them: not our problem
            pass


def _send(typ, end=False, defer=False, **fields):
    """Write one sync'ed message for the running request (dropped if idle).

    end=True marks `done`: the id is cleared under the lock, so no thread can
    send a message for this request after its `done`.

    defer=True queues the message instead: it goes out, in order, ahead of
    the next message sent, at the latest with `done`.  The cell's result is
    deferred so that result and `done` cost one write per pipe instead of
    two, and the driver one wake-up instead of two; the cell's code has
    finished by then, so its output still precedes the result."""
    global _critical, _pending, _sync, _cur_id
    main = _thread.get_ident() == _MAIN
    if main:
        _critical = True
    try:
        with _lock:
            if _cur_id is None or _child:
                return       # idle, or a forked child (it shares fd 4 with us)
            _flush_std()
            _sync += 1
            msg = {"type": typ, "id": _cur_id, "sync": _sync}
            msg.update(fields)
            # Lone surrogates (from surrogateescape'd data) become the JSON
            # escape \udcXX, so the line is always valid UTF-8 and valid JSON.
            line = (_enc(msg) + "\n").encode("utf-8", "backslashreplace")
            marker = b"\x00\x1eSBX-SYNC:%s:%d\x1e\x00" % (_NONCE, _sync)
            if _deferred:
                line = b"".join(_deferred[1::2]) + line
                marker = b"".join(_deferred[0::2]) + marker
                del _deferred[:]
            if defer:
                _deferred.extend((marker, line))
                return
            for fd in (_OUT1, _OUT2):
                try:
                    _write_all(fd, marker)
                except OSError:
                    pass
            try:
                _write_all(_CTL_OUT, line)
            except OSError:
                os._exit(1)  # the driver is gone; nobody to talk to
            if end:
                _cur_id = None
    finally:
        if main:
            _critical = False
            if _pending:
                _pending = False
                if _executing:
                    raise KeyboardInterrupt


def _after_fork():
    global _child, _lock
    _child = True
    _lock = _thread.RLock()  # the parent's may have been held by a thread


os.register_at_fork(after_in_child=_after_fork)


# ---------------------------------------------------------------- MIME bundles
_REPRS = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
          ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
          ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
          ("_repr_json_", "application/json"))
_PLAIN_TYPES = (int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset)


def _norm(mime, v):
    """Jupyter convention -> str: binary types base64, JSON types dumped."""
    if isinstance(v, tuple) and v:       # (data, metadata)
        v = v[0]
    if v is None or not isinstance(mime, str):
        return None
    if mime.startswith(("image/", "audio/", "video/", "application/pdf")) and mime != "image/svg+xml":
        if isinstance(v, (bytes, bytearray, memoryview)):
            return base64.b64encode(v).decode("ascii")
        return v if isinstance(v, str) else None   # str is already base64
    if mime == "application/json" or mime.endswith("+json"):
        return v if isinstance(v, str) else json.dumps(v, default=str)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    return _trunc(v) if mime == "text/plain" else v


def _trunc(s):
    return s if len(s) <= _MAX_PLAIN else s[:_MAX_PLAIN] + "…[truncated]"


def _plain(v):
    try:
        r = repr(v)
    except Exception:
        try:
            r = object.__repr__(v)
        except Exception:
            r = None
    return _trunc(r) if isinstance(r, str) else "<unrepresentable object>"


def _png(fn):
    buf = io.BytesIO()
    fn(buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _bundle(v):
    global _plotly_png_ok
    data = {"text/plain": _plain(v)}
    if type(v) in _PLAIN_TYPES or v is None or isinstance(v, type):
        return data          # fast path; classes would yield unbound _repr_*_
    m = sys.modules
    if "matplotlib.figure" in m and isinstance(v, m["matplotlib.figure"].Figure):
        try:
            data["image/png"] = _png(lambda b: v.savefig(b, format="png", bbox_inches="tight"))
        except Exception as e:
            data["text/plain"] += " (rendering failed: %s: %s)" % (type(e).__name__, _safe_str(e))
        try:
            chart = _chart(v)        # after savefig: tick labels are drawn
            if chart is not None:
                data[_CHART_MIME] = json.dumps(chart, default=str)
        except Exception:
            pass                     # best effort: never fails the command
        finally:
            plt = m.get("matplotlib.pyplot")
            if plt is not None:
                try:
                    plt.close(v)     # shown once; not again by the auto-capture
                except Exception:
                    pass
        return data
    if "PIL.Image" in m and isinstance(v, m["PIL.Image"].Image):
        try:
            data["image/png"] = _png(lambda b: v.save(b, format="PNG"))
        except Exception:    # CMYK, YCbCr, LAB, ... cannot be stored as PNG
            try:
                data["image/png"] = _png(lambda b: v.convert("RGBA" if v.mode.endswith("A") else "RGB").save(b, format="PNG"))
            except Exception:
                pass
        return data
    if "plotly.basedatatypes" in m and isinstance(v, m["plotly.basedatatypes"].BaseFigure):
        try:
            data["text/html"] = v.to_html(full_html=False, include_plotlyjs="cdn")
        except Exception:
            pass
        if _plotly_png_ok:
            try:
                data["image/png"] = base64.b64encode(v.to_image(format="png", engine="kaleido")).decode("ascii")
            except Exception:
                _plotly_png_ok = False   # no kaleido: don't pay for it again
        return data
    for name, mime in _REPRS:
        try:
            meth = getattr(v, name, None)
            r = _norm(mime, meth()) if callable(meth) else None
            if r is not None:
                data[mime] = r
        except Exception:
            pass
    if "pandas" in m and isinstance(v, getattr(m["pandas"], "DataFrame", ())):
        try:
            data[_TABLE_MIME] = _table(v)
        except Exception:
            pass                     # e.g. MultiIndex columns: no table data
    try:
        meth = getattr(v, "_repr_mimebundle_", None)
        if callable(meth):
            r = meth(include=None, exclude=None)
            if isinstance(r, tuple) and r:
                r = r[0]
            for mime, val in (r or {}).items():
                try:
                    val = _norm(mime, val)
                except Exception:
                    continue
                if val is not None:
                    data[mime] = val
    except Exception:
        pass
    return data


# ------------------------------------------------------------ structured data
_TABLE_MIME = "application/vnd.dataresource+json"
_CHART_MIME = "application/vnd.sandboxd.chart+json"
_MAX_TABLE_ROWS = 1000
_MAX_POINTS = 10000


def _table(df):
    """A DataFrame as a Table Schema data resource (pandas' orient="table"):
    {"schema": {"fields": [...], "primaryKey": [...]}, "data": [rows]}, the
    first _MAX_TABLE_ROWS rows, with "truncated": {"rows": total} past that."""
    n = len(df)
    s = df.head(_MAX_TABLE_ROWS).to_json(orient="table", date_format="iso", default_handler=str)
    if n > _MAX_TABLE_ROWS and s.endswith("}"):
        s = s[:-1] + ',"truncated":{"rows":%d}}' % n
    return s


def _jv(x):
    """One data value as JSON: numbers (NaN/inf -> null), dates as ISO text."""
    if type(x).__name__ in ("datetime64", "timedelta64"):
        return str(x)                # numpy: ISO 8601 text, not an int of ns
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()             # numpy scalar
        except Exception:
            pass
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, float)):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if hasattr(x, "isoformat"):
        return x.isoformat()
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return str(x)


def _label(artist):
    lab = artist.get_label()
    return "" if not isinstance(lab, str) or lab.startswith("_") else lab


def _tick_text(ax, axis, pos):
    """The drawn tick label at data position pos on axis "x" or "y", if any."""
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    for t in labels:
        p = t.get_position()[0 if axis == "x" else 1]
        if abs(p - pos) < 1e-9 and t.get_text():
            return t.get_text()
    return None


def _axes_chart(ax):
    """The chart one Axes draws, or None when it is none of the known kinds."""
    m = sys.modules
    c = {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel()}
    boxes = ax.__dict__.get("_sbx_boxes")
    if boxes:
        c["type"] = "box"
        c["boxes"] = [{"label": str(st.get("label", i + 1)), "min": _jv(st.get("whislo")),
                       "first_quartile": _jv(st.get("q1")), "median": _jv(st.get("med")),
                       "third_quartile": _jv(st.get("q3")), "max": _jv(st.get("whishi")),
                       "outliers": [_jv(o) for o in list(st.get("fliers", []))[:_MAX_POINTS]]}
                      for i, st in enumerate(boxes)]
        return c
    mpatches = m.get("matplotlib.patches")
    if mpatches is not None and ax.patches and all(isinstance(p, mpatches.Wedge) for p in ax.patches):
        c["type"] = "pie"
        c["slices"] = [{"label": _label(w), "fraction": _jv((w.theta2 - w.theta1) / 360.0)} for w in ax.patches]
        return c
    mcont = m.get("matplotlib.container")
    bars = [bc for bc in ax.containers if mcont is not None and isinstance(bc, mcont.BarContainer)]
    if bars:
        c["type"] = "bar"
        c["bars"] = []
        for bc in bars:
            horizontal = getattr(bc, "orientation", "vertical") == "horizontal"
            for r in bc.patches[:_MAX_POINTS]:
                if horizontal:
                    pos, value, axis = r.get_y() + r.get_height() / 2, r.get_width(), "y"
                else:
                    pos, value, axis = r.get_x() + r.get_width() / 2, r.get_height(), "x"
                lab = _tick_text(ax, axis, pos)
                c["bars"].append({"label": lab if lab is not None else _jv(pos),
                                  "value": _jv(value), "group": _label(bc)})
        if any(getattr(bc, "orientation", "") == "horizontal" for bc in bars):
            c["orientation"] = "horizontal"
        return c
    lines = [ln for ln in ax.get_lines() if ln.get_visible()]
    mcoll = m.get("matplotlib.collections")
    scatters = [pc for pc in ax.collections if mcoll is not None and isinstance(pc, mcoll.PathCollection)]
    if lines:
        c["type"] = "line"
        c["series"] = []
        for ln in lines:
            xs, ys = ln.get_xdata(), ln.get_ydata()
            n = min(len(xs), len(ys))
            pts = [[_jv(xs[i]), _jv(ys[i])] for i in range(min(n, _MAX_POINTS))]
            s = {"label": _label(ln), "points": pts}
            if n > _MAX_POINTS:
                s["truncated"] = {"points": n}
            c["series"].append(s)
        return c
    if scatters:
        c["type"] = "scatter"
        c["series"] = []
        for pc in scatters:
            offs = pc.get_offsets()
            n = len(offs)
            s = {"label": _label(pc), "points": [[_jv(p[0]), _jv(p[1])] for p in offs[:_MAX_POINTS]]}
            if n > _MAX_POINTS:
                s["truncated"] = {"points": n}
            c["series"].append(s)
        return c
    return None


def _chart(fig):
    """A matplotlib figure as chart data (see PROTOCOL.md): the chart of its
    one Axes, or a "composite" of the charts of several; None if none."""
    charts = [c for c in (_axes_chart(ax) for ax in fig.axes) if c is not None]
    if not charts:
        return None
    if len(charts) == 1:
        return charts[0]
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    return {"type": "composite", "title": title, "charts": charts}


def display(*objs, raw=False, **kwargs):
    """Show each object as a rich output (IPython-compatible subset).

    raw=True: each object is already a {mime: data} dict."""
    for o in objs:
        if raw and isinstance(o, dict):
            d = {k: n for k, n in ((k, _norm(k, x)) for k, x in o.items()) if n is not None}
            d.setdefault("text/plain", "")
        else:
            d = _bundle(o)
        _send("display", data=d)


builtins.display = display

_builtin_print = builtins.print


def _print(*objects, sep=" ", end="\n", file=None, flush=False):
    """print() that writes its text and `end` to the kernel's stdout/stderr
    with one write, not one per piece: with -u every piece is its own pipe
    write, and a print would often reach the driver as "text" then "\n".
    Anything unusual (another file, odd sep/end) goes to the real print."""
    f = sys.stdout if file is None else file
    if (f is not _orig_out and f is not _orig_err) or not (sep is None or isinstance(sep, str)) \
            or not (end is None or isinstance(end, str)):
        return _builtin_print(*objects, sep=sep, end=end, file=file, flush=flush)
    f.write((" " if sep is None else sep).join(map(str, objects)) + ("\n" if end is None else end))
    if flush:
        f.flush()


_print.__name__ = _print.__qualname__ = "print"
_print.__doc__ = _builtin_print.__doc__
builtins.print = _print


# ---------------------------------------------------------- matplotlib/plotly
def _flush_figures(discard=False):
    """Display every open pyplot figure (in number order), then close all."""
    plt = sys.modules.get("matplotlib.pyplot")
    if not hasattr(plt, "get_fignums"):
        return               # not imported (or replaced by the user)
    try:
        for num in [] if discard else plt.get_fignums():
            display(plt.figure(num))
    finally:
        plt.close("all")


def _patch_pyplot(plt):
    def show(*args, **kwargs):
        # Agg cannot show: emit the figures now, in order with prints.
        _flush_figures()
    show.__doc__ = plt.show.__doc__
    plt.show = show
    fig_mod = sys.modules.get("matplotlib.figure")
    if fig_mod is not None:
        fig_mod.Figure.show = lambda self, *a, **k: display(self)
    axes_mod = sys.modules.get("matplotlib.axes")
    if axes_mod is not None:
        # Box plots are lines once drawn: keep their statistics for _chart.
        bxp = axes_mod.Axes.bxp

        def _bxp(self, bxpstats, *args, **kwargs):
            r = bxp(self, bxpstats, *args, **kwargs)
            try:
                stats = [dict(st) for st in bxpstats]
                self.__dict__["_sbx_boxes"] = self.__dict__.get("_sbx_boxes", []) + stats
            except Exception:
                pass
            return r
        _bxp.__doc__, _bxp.__name__ = bxp.__doc__, bxp.__name__
        axes_mod.Axes.bxp = _bxp


def _patch_plotly(mod):
    mod.BaseFigure.show = lambda self, *a, **k: display(self)


def _patch_pil_image(mod):
    # PIL's show() hands the image to an external viewer (xdg-open,
    # display, ...), which a sandbox has not: it printed nothing. As in a
    # notebook (and E2B's interpreter), it displays the image instead.
    def show(self, title=None, **kwargs):
        display(self)
    show.__doc__ = mod.Image.show.__doc__
    mod.Image.show = show


def _patch_pil_imageshow(mod):
    # ImageShow.show(image) is the function Image.show calls; code may call
    # it directly. It returns whether a viewer took the image: one did.
    def show(image, title=None, **options):
        display(image)
        return True
    show.__doc__ = mod.show.__doc__
    mod.show = show


def _ipython_shim(mod):
    """Minimal IPython / IPython.display when the real IPython is missing."""
    dmod = types.ModuleType("IPython.display")

    class _Data:
        def __init__(self, data=None, url=None, filename=None, **kwargs):
            if filename is not None:
                with open(filename, "rb") as f:
                    data = f.read()
            self.data, self.url, self.filename = data, url, filename

        def _text(self):
            d = self.data
            return d.decode("utf-8", "replace") if isinstance(d, bytes) else d

        def __repr__(self):
            return "<IPython.display.%s object>" % type(self).__name__

    def _cls(name, meth, text=True):
        return type(name, (_Data,), {meth: (lambda self: self._text()) if text else (lambda self: self.data)})

    HTML, Markdown = _cls("HTML", "_repr_html_"), _cls("Markdown", "_repr_markdown_")
    SVG, Latex = _cls("SVG", "_repr_svg_"), _cls("Latex", "_repr_latex_")
    JSON = _cls("JSON", "_repr_json_", text=False)

    class Image(_Data):
        def __init__(self, data=None, url=None, filename=None, format=None, **kwargs):
            if isinstance(data, str) and url is None and filename is None:
                if data.startswith(("http://", "https://")):
                    data, url = None, data
                else:
                    data, filename = None, data
            super().__init__(data, url, filename)
            d = self.data if isinstance(self.data, bytes) else b""
            self.format = (format or ("jpeg" if d[:2] == b"\xff\xd8" else "png")).lower()

        def _repr_png_(self):
            return self.data if self.format == "png" else None

        def _repr_jpeg_(self):
            return self.data if self.format in ("jpeg", "jpg") else None

        def _repr_html_(self):
            return '<img src="%s"/>' % self.url if self.data is None and self.url else None

    for c in (HTML, Markdown, SVG, Latex, JSON, Image):
        c.__module__ = "IPython.display"
        setattr(dmod, c.__name__, c)
    dmod.display = display
    dmod.clear_output = lambda wait=False: None
    mod.display, mod.get_ipython = dmod, lambda: None   # matplotlib/plotly probe get_ipython()
    mod.__path__ = []
    sys.modules["IPython.display"] = dmod


_HOOKS = {"matplotlib.pyplot": _patch_pyplot, "plotly.basedatatypes": _patch_plotly,
          "PIL.Image": _patch_pil_image, "PIL.ImageShow": _patch_pil_imageshow,
          "IPython": _ipython_shim}


class _HookLoader:
    """Wraps the real loader: run the module, then patch it (never failing)."""

    def __init__(self, loader, patch):
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec) if self.loader else None

    def exec_module(self, module):
        if self.loader is not None:
            self.loader.exec_module(module)
            module.__loader__ = module.__spec__.loader = self.loader
        try:
            self.patch(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _Finder:
    """sys.meta_path hook: patches a few modules right after their first
    import, and provides the IPython shim when IPython is not installed.
    Nothing is imported eagerly; any failure falls back to a plain import."""
    busy = set()

    def find_spec(self, name, path=None, target=None):
        patch = _HOOKS.get(name)
        if patch is None or name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = None
            for f in sys.meta_path:
                fs = getattr(f, "find_spec", None) if f is not self else None
                spec = fs(name, path, target) if fs else None
                if spec is not None:
                    break
            if name == "IPython":
                if spec is not None:
                    return spec                  # the real IPython wins
                import importlib.machinery
                return importlib.machinery.ModuleSpec(name, _HookLoader(None, patch))
            if spec is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _HookLoader(spec.loader, patch)
            return spec
        except Exception:
            return None
        finally:
            self.busy.discard(name)


sys.meta_path.insert(0, _Finder())


# ------------------------------------------------------------------ execution
def _safe_str(e):
    try:
        return str(e)
    except Exception:
        return "<unprintable %s>" % type(e).__name__


def _run_code(co):
    global _loop, _keep_src
    # Code objects that outlive the cell (functions, classes, lambdas,
    # generators) may need its source later; otherwise it is dropped after
    # the command so linecache does not grow forever.
    _keep_src = _keep_src or any(type(c) is types.CodeType for c in co.co_consts)
    r = eval(co, _ns)
    if co.co_flags & _CO_COROUTINE:      # top-level await
        if _loop is None:
            import asyncio
            _loop = asyncio.new_event_loop()
            asyncio.set_event_loop(_loop)
        r = _loop.run_until_complete(r)
    return r


def _shell(cmd):
    """Runs one `!cmd` line in bash, in the cwd, its output on the kernel's
    fd 1/2 (streamed like any output); its status goes to `_exit_code`."""
    import subprocess
    _flush_std()
    rc = subprocess.run(["bash", "-c", cmd]).returncode
    _ns["_exit_code"] = rc


builtins.__sandboxd_shell__ = _shell


def _special_lines(lines):
    """{line index: "!" or "%"} for the lines of a cell that begin, as a
    statement, with `!` (a shell line) or `%` (an IPython magic): neither is
    valid Python there, and a `!` or `%` inside a string is not one."""
    if not any(l.lstrip()[:1] in ("!", "%") for l in lines):
        return {}                # the common case: no tokenizing
    import tokenize
    found = {}
    try:
        depth, at_start = 0, True
        for tok in tokenize.generate_tokens(iter(lines).__next__ if lines else iter([""]).__next__):
            t, text = tok.type, tok.string
            if t in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
                at_start = depth == 0
                continue
            if t in (tokenize.COMMENT, tokenize.ENDMARKER):
                continue
            if at_start and depth == 0 and text in ("!", "%", "%%") and t in (tokenize.ERRORTOKEN, tokenize.OP):
                found[tok.start[0] - 1] = text[0]
            if t == tokenize.OP and text in "([{":
                depth += 1
            elif t == tokenize.OP and text in ")]}":
                depth = max(0, depth - 1)
            at_start = False
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # e.g. a shell line with an unbalanced triple quote: by line instead.
        found = {i: l.lstrip()[0] for i, l in enumerate(lines) if l.lstrip()[:1] in ("!", "%")}
    return found


def _transform(code, lines, fname):
    """The cell with each `!cmd` line made a call of _shell (same line
    numbers); a `%magic` line is an error: IPython magics are not available."""
    special = _special_lines(lines)
    if not special:
        return code, lines
    out = list(lines)
    for i, kind in sorted(special.items()):
        line = lines[i]
        indent = line[:len(line) - len(line.lstrip())]
        body = line.strip()
        if kind == "%":
            name = body.lstrip("%").split(None, 1)[0] if body.lstrip("%") else ""
            hint = (" Install packages with a shell line instead: !pip install <package>"
                    if name in ("pip", "conda", "mamba") else "")
            err = SyntaxError("%%%s is not supported: sandboxd runs a plain Python kernel without "
                              "IPython magics (only !cmd shell lines are available).%s" % (name, hint),
                              (fname, i + 1, len(indent) + 1, line))
            raise err
        out[i] = "%s__sandboxd_shell__(%r)\n" % (indent, body[1:].strip())
    return "".join(out), out


def _exec_cell(code):
    global _cell, _keep_src
    _cell += 1
    _keep_src = False
    fname = "<cell-%d>" % _cell
    # Registered (mtime None survives checkcache) so tracebacks and
    # inspect.getsource show the user's lines, also from later cells.
    lines = io.StringIO(code, None).readlines()   # universal newlines, like the tokenizer
    linecache.cache[fname] = (len(code), None, lines, fname)
    code, lines = _transform(code, lines, fname)
    tree = ast.parse(code, fname)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        node = tree.body[-1]
        # A trailing ';' suppresses the result (notebook habit: `plt.plot(x);`).
        rest = lines[node.end_lineno - 1].encode()[node.end_col_offset:]
        if not rest.lstrip().startswith(b";"):
            last = ast.Expression(tree.body.pop().value)
    if tree.body:
        _run_code(compile(tree, fname, "exec", _FLAGS, True))
    if last is not None:
        val = _run_code(compile(last, fname, "eval", _FLAGS, True))
        if val is not None:
            _ns["_"] = val
            _send("result", defer=True, data=_bundle(val))


def _guarded(fn, *args):
    """Run fn with SIGINT enabled; return the exception it raised, if any.
    (No bytecode that checks for signals runs between the except and the
    finally, so an interrupt cannot escape once fn has returned or raised.)"""
    global _executing
    _executing = True
    try:
        fn(*args)
    except BaseException as e:
        return e
    finally:
        _executing = False


def _strip(e, seen, top=True):
    """Remove the kernel's frames from e's traceback (and its chain), like
    Jupyter: the leading ones (exec machinery, up to the first cell frame)
    and any further down (the SIGINT handler, display() internals)."""
    if e is None or id(e) in seen:
        return None
    seen.add(id(e))
    tb = e.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == _KFILE or
                              top and not tb.tb_frame.f_code.co_filename.startswith("<cell-")):
        tb = tb.tb_next
    tb0 = tb
    while tb is not None:
        nxt = tb.tb_next
        while nxt is not None and nxt.tb_frame.f_code.co_filename == _KFILE:
            nxt = nxt.tb_next
        tb.tb_next = nxt                 # writable since Python 3.7
        tb = nxt
    try:
        e.__traceback__ = tb0
    except Exception:
        pass
    _strip(e.__cause__, seen, False)
    _strip(e.__context__, seen, False)
    return tb0


def _report(e):
    """Send `error` for e; return the done status it implies."""
    # sys.exit() / sys.exit(0) / exit(): a deliberate successful stop, as for a
    # script -> status "ok" and no error. Any other code is an error.
    if isinstance(e, SystemExit) and (e.code is None or (isinstance(e.code, int) and e.code == 0)):
        return "ok"
    tb = _strip(e, set())
    try:
        lines = traceback.format_exception(type(e), e, tb)
    except Exception:
        lines = ["%s: %s\n" % (type(e).__name__, _safe_str(e))]
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    _send("error", ename=type(e).__name__, evalue=_trunc(_safe_str(e)),
          traceback=[_trunc(l) for l in lines])
    return "error"


def _repair_stdio():
    # Between commands: undo os.close(1)/sys.stdout.close() from the last one,
    # so later commands still print. A user's own live replacement is kept.
    for fd, dup, name, orig in ((1, _OUT1, "stdout", _orig_out), (2, _OUT2, "stderr", _orig_err)):
        try:
            os.fstat(fd)
        except OSError:
            try:
                os.dup2(dup, fd)
            except OSError:
                pass
        try:
            cur = getattr(sys, name, None)
            if cur is None or cur.closed:
                if orig.closed:
                    orig = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                            errors="backslashreplace", write_through=True)
                    globals()["_orig_" + name[3:]] = orig
                setattr(sys, name, orig)
        except Exception:
            pass


def _set_env(env):
    """Apply a request's env (its keys set in os.environ, so subprocesses
    see them too); returns what to restore: each key's old value or None."""
    saved = {}
    for k, v in env.items():
        try:
            saved[k] = os.environ.get(k)
            os.environ[k] = v
        except Exception:
            pass
    return saved


def _restore_env(saved):
    for k, v in saved.items():
        try:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        except Exception:
            pass


def _run(cid, code, env=None):
    global _cur_id
    _cur_id = cid
    status = "ok"
    saved = _set_env(env) if env else None
    try:
        _repair_stdio()
        # _signal's getsignal skips signal's enum conversion (it is per command).
        if _signal.getsignal(signal.SIGINT) is not _on_sigint:
            signal.signal(signal.SIGINT, _on_sigint)   # user replaced it
        if not hasattr(builtins, "display"):
            builtins.display = display
        if not hasattr(builtins, "__sandboxd_shell__"):
            builtins.__sandboxd_shell__ = _shell
        e = _guarded(_exec_cell, code)
        if _child:                       # a child forked by the cell came back
            _flush_std()                 # here: it must not become a 2nd kernel
            rc = 0 if e is None else 1
            if isinstance(e, SystemExit):
                rc = e.code if isinstance(e.code, int) else int(e.code is not None)
            os._exit(rc & 0xFF)
        if e is not None:
            status = _report(e)
        if "matplotlib.pyplot" in sys.modules:
            # Like Jupyter, also after an error; after an interrupt the
            # figures are dropped so that `done` comes quickly.
            e2 = _guarded(_flush_figures, isinstance(e, KeyboardInterrupt))
            if e2 is not None:
                status = "error" if _report(e2) == "error" else status
    except BaseException as e:           # a bug or a racing SIGINT in here
        try:
            status = "error" if _report(e) == "error" else status
        except BaseException:
            status = "error"
    if saved:
        _restore_env(saved)
    if not _keep_src:
        linecache.cache.pop("<cell-%d>" % _cell, None)
    # Like Jupyter's execution_count: cells run by this kernel, this one
    # included (a restarted kernel counts from 1 again).
    _send("done", end=True, status=status, execution_count=_cell)


# --- hibernation (ioproto/PROTOCOL.md, *Hibernation*) -----------------------
# The user's globals are pickled (dill: functions, classes and lambdas of
# __main__ by value) into a file under /io/hibernate, written to a temporary
# name, fsynced and renamed, so a half-written snapshot is never read; and
# loaded back into a fresh kernel on wake. Both happen only here, inside the
# sandbox's own container: the host never unpickles anything.
_HIB_SKIP = frozenset(("__name__", "__doc__", "__package__", "__loader__", "__spec__",
                       "__builtins__", "__annotations__", "__file__", "__cached__"))


def _pickler():
    try:
        import dill
        return dill
    except ImportError:
        pass
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        pass
    # The standard library's pickle saves data but not functions or classes
    # defined in the session: those are reported lost, one by one.
    import pickle
    return pickle


def _unkeepable(v):
    """Why v cannot survive a hibernation, or None: things tied to this
    process that pickling would fake (dill reopens files by name) or fail on."""
    if isinstance(v, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "a generator or coroutine (its running frame cannot be saved)"
    if isinstance(v, io.IOBase):
        return "an open file (reopen it after the wake)"
    sock = sys.modules.get("socket")
    if sock is not None and isinstance(v, sock.socket):
        return "a socket"
    thr = sys.modules.get("threading")
    if thr is not None and isinstance(v, thr.Thread):
        return "a thread"
    return None


def _why(e):
    return ("cannot be pickled: %s: %s" % (type(e).__name__, _safe_str(e)))[:240]


def _snapshot(pk, path):
    names, lost, mods = {}, [], {}
    for name, v in list(_ns.items()):
        if name in _HIB_SKIP:
            continue
        if isinstance(v, types.ModuleType):
            mods[name] = v.__name__
            continue
        why = _unkeepable(v)
        if why:
            lost.append({"name": name, "why": why})
            continue
        names[name] = v
    d, base = os.path.split(path)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".tmp-" + base)

    def write():
        payload = {"version": 1, "modules": mods, "names": names, "lost": lost}
        with open(tmp, "wb") as f:
            pk.dump(payload, f, protocol=4)
            f.flush()
            os.fsync(f.fileno())

    try:
        write()
    except Exception:
        # One name spoils the whole dump: find them one by one (shared
        # references between the rest are kept by the second dump).
        for name in list(names):
            try:
                pk.dumps(names[name], protocol=4)
            except Exception as e:
                lost.append({"name": name, "why": _why(e)})
                del names[name]
        write()
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"level": "globals", "bytes": os.path.getsize(path),
            "names": sorted(list(names) + list(mods)), "lost": lost}


def _restore(pk, path):
    import importlib
    with open(path, "rb") as f:
        payload = pk.load(f)
    restored, lost = [], list(payload.get("lost") or [])
    for name, mod in (payload.get("modules") or {}).items():
        try:
            _ns[name] = importlib.import_module(mod)
            restored.append(name)
        except BaseException as e:
            lost.append({"name": name, "why": ("import %s failed: %s" % (mod, _safe_str(e)))[:240]})
    for name, v in (payload.get("names") or {}).items():
        _ns[name] = v
        restored.append(name)
    return {"level": "globals", "names": sorted(restored), "lost": lost}


def _hib(cid, op, path):
    """Runs a snapshot or restore request; answers with done and its outcome."""
    global _cur_id, _executing
    _cur_id = cid
    status, res = "ok", None
    pk = _pickler()
    _executing = True
    try:
        if pk is None:
            status, res = "error", {"level": "files", "reason": "neither dill nor cloudpickle is installed in the sandbox image"}
        elif op == "snapshot":
            res = _snapshot(pk, path)
        else:
            res = _restore(pk, path)
    except BaseException as e:
        status = "error"
        res = {"level": "files", "reason": ("%s failed: %s: %s" % (op, type(e).__name__, _safe_str(e)))[:1000]}
    finally:
        _executing = False
    _send("done", end=True, status=status, hib=res)


def _adopt(cid, path):
    """Starts this kernel over for the sandbox whose driver adopted it
    (driver/adopt.go): its working directory becomes path (the stacked
    /workspace; the old cwd is the hidden directory), and what the pool's
    warm-up left that a fresh kernel would not have is dropped: the user's
    names, the cell counter, the cells' source, the last exception.
    Imported modules stay: keeping them is the point."""
    global _cur_id, _cell, _keep_src
    _cur_id = cid
    status, why = "ok", None
    try:
        os.chdir(path)
        _ns.clear()
        _ns.update(_FRESH_NS)
        _cell, _keep_src = 0, False
        for name in [n for n in linecache.cache if isinstance(n, str) and n.startswith("<cell-")]:
            linecache.cache.pop(name, None)
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        # Finders cache directory listings by path and mtime; the stacked
        # directory has the old one's path.
        import importlib
        importlib.invalidate_caches()
    except BaseException as e:
        status, why = "error", ("adopt failed: %s: %s" % (type(e).__name__, _safe_str(e)))[:1000]
    _send("done", end=True, status=status, evalue=why)


def _read_line(buf):
    """The next line from fd 3; exits when the driver closed it."""
    while True:
        nl = buf.find(b"\n")
        if nl >= 0:
            line = bytes(buf[:nl])
            del buf[:nl + 1]
            return line
        try:
            chunk = os.read(_CTL_IN, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:                        # driver closed fd 3: quit now, even
            _flush_std()                     # if user threads are still running
            os._exit(0)
        buf += chunk


def _main():
    global _cur_id, _NONCE
    buf = bytearray()
    try:
        nonce = json.loads(_read_line(buf))["nonce"]
        if not (isinstance(nonce, str) and len(nonce) >= 16 and all(c in "0123456789abcdef" for c in nonce)):
            raise ValueError("bad nonce")
    except Exception:
        os._exit(2)                          # not started by the driver
    _NONCE = nonce.encode("ascii")
    del nonce
    _write_all(_CTL_OUT, (_enc({"type": "ready", "pid": os.getpid()}) + "\n").encode())
    while True:
        line = _read_line(buf)
        if not line.strip():
            continue
        req = None
        try:
            req = json.loads(line)
            setenv = req.get("setenv") or {}
            if not isinstance(setenv, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in setenv.items()):
                raise ValueError("'setenv' must map strings to strings")
            _set_env(setenv)                 # for good: never restored
            if req.get("op") in ("snapshot", "restore"):
                _hib(req["id"], req["op"], req["path"])
                continue
            if req.get("op") == "adopt":
                _adopt(req["id"], req["path"])
                continue
            cid, code, env = req["id"], req["code"], req.get("env") or {}
            if not isinstance(cid, str) or not isinstance(code, str):
                raise ValueError("'id' and 'code' must be strings")
            if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                raise ValueError("'env' must map strings to strings")
        except Exception as e:
            cid = req.get("id") if isinstance(req, dict) else ""
            _cur_id = cid if isinstance(cid, str) else ""
            _send("error", ename="ProtocolError", evalue="bad request: %s" % _safe_str(e), traceback=[])
            _send("done", end=True, status="error")
            continue
        _run(cid, code, env)


if __name__ == "__main__":
    _main()
