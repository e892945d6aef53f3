"""Live tests against a real sandboxd (and real containers).

Run through `go test ./clients/python` (python_test.go), which builds and
starts sandboxd and sets:
  SANDBOXD_TEST_ADDR     sandboxd's gRPC address
  SANDBOXD_TEST_CONTROL  base URL of a control endpoint: POST /kill SIGKILLs
                         sandboxd, POST /start starts it again on the same
                         address and state directory (each returns once done)
Without SANDBOXD_TEST_ADDR these tests are skipped.
"""

import os
import threading
import time
import unittest
import urllib.request
import uuid

import sandboxd

ADDR = os.environ.get("SANDBOXD_TEST_ADDR")
CONTROL = os.environ.get("SANDBOXD_TEST_CONTROL")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def control(action, timeout=180):
    """Asks the Go side to kill or start sandboxd; raises with its answer
    unless it succeeded."""
    req = urllib.request.Request(CONTROL + "/" + action, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode()


@unittest.skipUnless(ADDR, "SANDBOXD_TEST_ADDR is not set (run these through `go test ./clients/python`)")
class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = sandboxd.Client(ADDR, resume_timeout=120, call_timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def setUp(self):
        self.user = "py-" + uuid.uuid4().hex[:12]
        self.sb = self.client.acquire(self.user)
        self.assertTrue(self.sb.created)
        self.assertTrue(self.sb.id.startswith("sb-"))

    def tearDown(self):
        try:
            self.sb.delete(missing_ok=True)
        except sandboxd.SandboxdError as e:  # sandboxd down after a failure
            print("tearDown: deleting %s: %s" % (self.sb.id, e))

    def test_state_is_kept_between_commands(self):
        first = self.sb.run_collect("x = 41")
        self.assertTrue(first.ok, first)
        self.assertEqual(first.results, [])
        second = self.sb.run_collect("x + 1")
        self.assertTrue(second.ok, second)
        self.assertEqual([r.text for r in second.results], ["42"])

    def test_run_stateless_leaves_nothing(self):
        before = {s.id for s in self.client.list()}
        run = self.client.run_stateless("import os\nprint(6 * 7, os.environ['MODE'])", env={"MODE": "once"}).wait()
        self.assertTrue(run.ok, run)
        self.assertEqual(run.stdout, "42 once\n")
        self.assertTrue(run.command_id)
        left = [s for s in self.client.list() if s.id not in before]
        self.assertEqual(left, [], "a stateless run left sandboxes behind")
        with self.assertRaises(sandboxd.InvalidArgument):
            self.client.run_stateless("1", language="cobol").wait()

    def test_events_in_order(self):
        ex = self.sb.run("print('hello')\n21 * 2")
        events = list(ex)
        self.assertEqual([type(e) for e in events],
                         [sandboxd.Started, sandboxd.Stdout, sandboxd.Result, sandboxd.Done])
        self.assertEqual([e.seq for e in events], [1, 2, 3, 4])
        self.assertTrue(all(e.command_id == ex.command_id for e in events))
        self.assertEqual(events[0].language, "python")
        self.assertEqual(ex.stdout, "hello\n")
        self.assertIsNotNone(events[-1].time)

    def test_matplotlib_figure_arrives_as_png(self):
        ex = self.sb.run_collect(
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.show()\n")
        self.assertTrue(ex.ok, ex)
        pngs = [d.png for d in ex.displays if "image/png" in d.data]
        self.assertEqual(len(pngs), 1, "want one display with image/png, got %r" % [list(d.data) for d in ex.displays])
        self.assertTrue(pngs[0].startswith(PNG_MAGIC), pngs[0][:16])
        self.assertGreater(len(pngs[0]), 1000)

    def test_python_exception_is_an_error_event(self):
        ex = self.sb.run_collect("def f():\n    raise ValueError('bad value')\nf()")
        self.assertIs(ex.status, sandboxd.CommandStatus.ERROR)
        self.assertEqual(ex.error.ename, "ValueError")
        self.assertEqual(ex.error.evalue, "bad value")
        self.assertIn("ValueError: bad value", ex.error.format())

    def test_bash_exit_code(self):
        ex = self.sb.run_collect("echo out; echo err >&2; exit 3", language="bash")
        self.assertIs(ex.status, sandboxd.CommandStatus.ERROR)
        self.assertEqual(ex.done.exit_code, 3)
        self.assertEqual(ex.stdout, "out\n")
        self.assertEqual(ex.stderr, "err\n")

    def test_files(self):
        info = self.sb.files.upload("data/in.txt", b"one\ntwo\n")
        self.assertEqual((info.path, info.size, info.is_dir), ("data/in.txt", 8, False))
        ex = self.sb.run_collect(
            "lines = open('data/in.txt').read().split()\n"
            "open('data/out.txt', 'w').write('-'.join(lines))\n"
            "len(lines)")
        self.assertEqual([r.text for r in ex.results], ["2"])
        self.assertIn("data/out.txt", [f.path for f in ex.done.files])
        self.assertEqual(self.sb.files.download("data/out.txt"), b"one-two")
        self.assertEqual([f.path for f in self.sb.files.list("data")], ["data/in.txt", "data/out.txt"])
        big = os.urandom(3 * 1024 * 1024 + 5)  # several upload chunks
        import io
        self.sb.files.upload("/workspace/big.bin", io.BytesIO(big))
        self.assertEqual(self.sb.files.download("big.bin"), big)
        with self.assertRaises(sandboxd.NotFound):
            self.sb.files.download("missing.txt")
        with self.assertRaises(sandboxd.InvalidArgument):
            self.sb.files.download("data")  # a directory
        with self.assertRaises(sandboxd.InvalidArgument):
            self.sb.files.upload("../escape.txt", b"x")

    def test_file_operations(self):
        files = self.sb.files
        d = files.mkdir("a/b", parents=True)
        self.assertEqual((d.path, d.type, d.is_dir), ("a/b", "DIRECTORY", True))
        with self.assertRaises(sandboxd.AlreadyExists):
            files.mkdir("a/b")
        with self.assertRaises(sandboxd.NotFound):
            files.mkdir("x/y")  # no parents
        info = files.upload("a/b/f.txt", b"hello")
        self.assertEqual((info.type, info.uid, info.mode & 0o600), ("FILE", 1000, 0o600))
        self.assertEqual([f.path for f in files.list("a", depth=2)], ["a/b", "a/b/f.txt"])
        self.assertEqual([f.path for f in files.list("a")], ["a/b"])
        moved = files.rename("a/b/f.txt", "g.txt")
        self.assertEqual((moved.path, moved.size), ("g.txt", 5))
        files.upload("h.txt", b"other")
        with self.assertRaises(sandboxd.AlreadyExists):
            files.rename("g.txt", "h.txt")
        files.rename("g.txt", "h.txt", overwrite=True)
        self.assertEqual(files.download("h.txt"), b"hello")
        with self.assertRaises(sandboxd.FailedPrecondition):
            files.remove("a")  # not empty
        files.remove("a", recursive=True)
        with self.assertRaises(sandboxd.NotFound):
            files.remove("a")
        self.assertEqual([f.path for f in files.list()], ["h.txt"])

    def test_watch_reports_changes_made_after_it_returns(self):
        self.sb.files.mkdir("w")
        events = []
        # The timeout bounds the wait: a missing event fails the test with
        # DeadlineExceeded instead of hanging it.
        with self.sb.files.watch("w", recursive=True, timeout=60) as watch:
            # The watch is in place when watch() returns, and a new
            # directory's watch when its CREATE arrives: the writes below
            # are reported, in order per path. (A file made and removed in
            # a directory before that directory's CREATE arrived may be
            # missed: it was gone before anything could watch it.)
            self.assertTrue(self.sb.run_collect("mkdir -p w/sub", language="bash").ok)
            try:
                for ev in watch:
                    events.append((ev.type, ev.path))
                    if ev.type == "CREATE" and ev.path == "w/sub":
                        self.assertTrue(self.sb.run_collect(
                            "echo x > w/sub/new.txt && rm w/sub/new.txt", language="bash").ok)
                    if ev.type == "REMOVE" and ev.path == "w/sub/new.txt":
                        break
            except sandboxd.DeadlineExceeded:
                self.fail("no REMOVE of w/sub/new.txt within 60 s; got %r" % events)
        self.assertIn(("CREATE", "w/sub"), events)
        self.assertIn(("CREATE", "w/sub/new.txt"), events)
        self.assertLess(events.index(("CREATE", "w/sub/new.txt")), events.index(("REMOVE", "w/sub/new.txt")))

    def test_metadata_timeout_and_commands(self):
        user = "py-" + uuid.uuid4().hex[:12]
        sb = self.client.acquire(user, metadata={"team": "py", "run": user}, idle_timeout=600)
        try:
            self.assertEqual(sb.info.metadata, {"team": "py", "run": user})
            self.assertEqual(sb.info.idle_timeout.total_seconds(), 600)
            listed = self.client.list(metadata={"run": user})
            self.assertEqual([i.id for i in listed], [sb.id])
            self.assertEqual(self.client.list(metadata={"run": user, "team": "other"}), [])
            info = sb.set_timeout(120)
            self.assertEqual(info.idle_timeout.total_seconds(), 120)
            with self.assertRaises(sandboxd.InvalidArgument):
                sb.set_timeout(10 * 365 * 24 * 3600)  # far above the server's maximum
            ids = [sb.run_collect("print(%d)" % i).command_id for i in range(3)]
            cmds = sb.list_commands()
            self.assertEqual([c.command_id for c in cmds[:3]], ids[::-1])
            self.assertTrue(all(c.state == "FINISHED" and c.status is sandboxd.CommandStatus.OK
                                and c.output_available for c in cmds[:3]), cmds[:3])
            self.assertEqual(len(sb.list_commands(limit=2)), 2)
        finally:
            sb.delete(missing_ok=True)

    def test_errors_carry_the_server_message(self):
        with self.assertRaises(sandboxd.NotFound) as cm:
            self.client.sandbox("sb-" + "a" * 20)
        self.assertTrue(cm.exception.message)
        with self.assertRaises(sandboxd.InvalidArgument) as cm:
            self.client.sandbox("nope")
        self.assertIn("nope", cm.exception.message)
        with self.assertRaises(sandboxd.InvalidArgument):
            self.sb.run("1", command_id="-not-a-valid-id").wait()
        with self.assertRaises(sandboxd.InvalidArgument):
            self.client.acquire("bad user id!")

    def test_command_id_is_idempotent(self):
        cid = "cmd-" + uuid.uuid4().hex
        first = self.sb.run_collect("n = globals().get('n', 0) + 1\nn", command_id=cid)
        again = self.sb.run_collect("n = globals().get('n', 0) + 1\nn", command_id=cid)
        self.assertEqual([r.text for r in first.results], ["1"])
        self.assertEqual([r.text for r in again.results], ["1"])  # a replay
        self.assertEqual([r.text for r in self.sb.run_collect("n").results], ["1"])  # ran once
        replay = self.sb.resume(cid, after_seq=1).wait()
        self.assertEqual([e.seq for e in replay.events], [e.seq for e in first.events][1:])

    def test_interrupt(self):
        ex = self.sb.run("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
        for event in ex:
            if isinstance(event, sandboxd.Stdout):
                break
        ex.interrupt()
        ex.wait()
        self.assertIs(ex.status, sandboxd.CommandStatus.INTERRUPTED, ex.done)
        self.assertLess(ex.done.duration.total_seconds(), 30)
        self.assertTrue(self.sb.run_collect("1").ok)

    def test_reattach_and_acquire_again(self):
        again = self.client.acquire(self.user)
        self.assertEqual(again.id, self.sb.id)
        self.assertFalse(again.created)
        self.assertEqual(self.client.sandbox(self.sb.id).info.user_id, self.user)
        self.assertIn(self.sb.id, [s.id for s in self.client.list(user_id=self.user)])

    def test_delete_on_exit(self):
        with self.client.acquire(self.user + "-tmp", delete_on_exit=True) as sb:
            self.assertTrue(sb.run_collect("1").ok)
        with self.assertRaises(sandboxd.NotFound):
            self.client.sandbox(sb.id)
        with self.client.acquire(self.user) as kept:
            pass
        self.assertEqual(self.client.sandbox(kept.id).info.state, "RUNNING")

    @unittest.skipUnless(CONTROL, "SANDBOXD_TEST_CONTROL is not set")
    def test_network_refused_without_allow_network(self):
        # The live server runs without --allow-network: a policy is refused
        # as network is (the request is wrong here), and the network calls
        # say the server has no networking; the sealed sandbox is unchanged.
        self.assertFalse(self.sb.info.network)
        self.assertIsNone(self.sb.info.network_policy)
        with self.assertRaises(sandboxd.InvalidArgument) as cm:
            self.client.acquire("py-net-" + uuid.uuid4().hex[:8], network_policy=sandboxd.NetworkPolicy(allow_out=["pypi.org"]))
        self.assertIn("--allow-network", cm.exception.message)
        for call in (lambda: self.sb.update_network_policy(sandboxd.NetworkPolicy()), self.sb.network_status,
                     lambda: self.sb.get_host(8080)):
            with self.assertRaises(sandboxd.FailedPrecondition) as cm:
                call()
            self.assertIn("--allow-network", cm.exception.message)

    def test_resumes_after_sandboxd_is_killed_and_restarted(self):
        # Prints a line every 0.2 s for 3 s; records each run in a file.
        code = (
            "import time\n"
            "with open('runs.txt', 'a') as f:\n"
            "    f.write('run\\n')\n"
            "for i in range(15):\n"
            "    print('line %d' % i, flush=True)\n"
            "    time.sleep(0.2)\n"
        )
        want = "".join("line %d\n" % i for i in range(15))
        ex = self.sb.run(code)
        restart_errors = []

        def restart():
            # Starts sandboxd again once the client has found it down at
            # least twice (the broken Execute stream, then a StreamCommand
            # refused), so that the retry path is exercised.
            try:
                deadline = time.monotonic() + 60
                while ex.resumes < 2:
                    if time.monotonic() > deadline:
                        raise AssertionError("the client did not retry within 60 s (resumes=%d)" % ex.resumes)
                    time.sleep(0.01)
                control("start")
            except Exception as e:  # reported by the test below
                restart_errors.append(e)

        restarter = None
        stdout_at_kill = None
        for _ in ex:
            if restarter is None and "line 2\n" in ex.stdout:
                stdout_at_kill = ex.stdout
                control("kill")  # returns once sandboxd is dead
                # The client notices the dead server and retries while it
                # restarts.
                restarter = threading.Thread(target=restart, daemon=True)
                restarter.start()
        self.assertIsNotNone(restarter, "the command finished without printing line 2: %r" % ex.stdout)
        restarter.join(timeout=180)
        self.assertFalse(restarter.is_alive(), "sandboxd did not restart within 180 s")
        self.assertEqual(restart_errors, [])
        self.assertNotIn("line 14", stdout_at_kill, "the command had finished before sandboxd was killed")

        self.assertIs(ex.status, sandboxd.CommandStatus.OK, ex.done)
        self.assertEqual(ex.stdout, want)  # every line once, in order
        self.assertEqual([e.seq for e in ex.events], list(range(1, len(ex.events) + 1)))
        self.assertIsInstance(ex.events[0], sandboxd.Started)
        self.assertGreaterEqual(ex.resumes, 2)
        print("\n    resumed after the restart: %d retries, %d events, command took %.1f s"
              % (ex.resumes, len(ex.events), ex.done.duration.total_seconds()), end=" ", flush=True)
        self.assertEqual(self.sb.files.download("runs.txt"), b"run\n")  # ran once
        # The sandbox and its interpreter survived the restart.
        self.assertTrue(self.sb.run_collect("i").ok)
        self.assertEqual([r.text for r in self.sb.run_collect("i").results], ["14"])


if __name__ == "__main__":
    unittest.main()
