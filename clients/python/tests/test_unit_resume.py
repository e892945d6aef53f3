"""Unit tests (no server) of Execution's resumption, against a fake stub that
drops streams on cue: which calls are made, with which after_seq, and that
each event is delivered once, in order."""

import unittest

import grpc

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb
from sandboxd.events import SandboxInfo


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__()
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


def ev(seq, kind="stdout"):
    if kind == "done":
        return pb.ExecuteEvent(seq=seq, command_id="c1", done=pb.Done(status=pb.COMMAND_STATUS_OK))
    if kind == "started":
        return pb.ExecuteEvent(seq=seq, command_id="c1", started=pb.Started(language="python"))
    return pb.ExecuteEvent(seq=seq, command_id="c1", stdout=pb.OutputChunk(text="%d\n" % seq))


class FakeStream:
    """A server stream: yields its events, then raises its error if any."""

    def __init__(self, events, error=None):
        self._events, self._error = list(events), error
        self.cancelled = False

    def __iter__(self):
        yield from self._events
        if self._error is not None:
            raise self._error

    def cancel(self):
        self.cancelled = True


class FakeStub:
    """Answers each call with the next scripted FakeStream and records it."""

    def __init__(self, script):
        self.script = list(script)
        self.calls = []

    def _next(self, name, arg):
        self.calls.append((name, arg))
        if not self.script:
            raise AssertionError("unexpected call %s(%s)" % (name, arg))
        want, stream = self.script.pop(0)
        if want != name:
            raise AssertionError("call %s, want %s" % (name, want))
        return stream

    def Execute(self, req, metadata=None):
        return self._next("Execute", req.command_id)

    def StreamCommand(self, req, metadata=None):
        return self._next("StreamCommand", req.after_seq)


def unavailable():
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed")


class ResumeTest(unittest.TestCase):
    def sandbox(self, script, resume_timeout=30.0):
        client = sandboxd.Client("127.0.0.1:1", resume_timeout=resume_timeout)
        self.addCleanup(client.close)
        client._stub = self.stub = FakeStub(script)
        info = SandboxInfo(id="sb-x", user_id="u", state="RUNNING", state_reason="", created_at=None,
                           last_active_at=None, expires_at=None, image="img")
        return sandboxd.Sandbox(client, info)

    def setUp(self):
        # Keep the backoff short: these tests are about the calls made.
        self._backoff = (sandboxd.Execution.INITIAL_BACKOFF, sandboxd.Execution.MAX_BACKOFF)
        sandboxd.Execution.INITIAL_BACKOFF, sandboxd.Execution.MAX_BACKOFF = 0.01, 0.02

    def tearDown(self):
        sandboxd.Execution.INITIAL_BACKOFF, sandboxd.Execution.MAX_BACKOFF = self._backoff

    def test_dropped_execute_resumes_after_the_last_event(self):
        sb = self.sandbox([
            ("Execute", FakeStream([ev(1, "started"), ev(2), ev(3)], unavailable())),
            ("StreamCommand", FakeStream([ev(4)], FakeRpcError(grpc.StatusCode.ABORTED, "x"))),
            ("StreamCommand", FakeStream([ev(5)])),  # ends without Done
            ("StreamCommand", FakeStream([ev(6, "done")])),
        ])
        ex = sb.run("code", command_id="c1")
        seqs = [e.seq for e in ex]
        self.assertEqual(seqs, [1, 2, 3, 4, 5, 6])
        self.assertEqual(self.stub.calls, [
            ("Execute", "c1"), ("StreamCommand", 3), ("StreamCommand", 4), ("StreamCommand", 5)])
        self.assertEqual(ex.stdout, "2\n3\n4\n5\n")
        self.assertIs(ex.status, sandboxd.CommandStatus.OK)
        self.assertEqual(ex.resumes, 3)

    def test_execute_is_resent_only_when_the_server_never_got_it(self):
        sb = self.sandbox([
            ("Execute", FakeStream([], unavailable())),
            ("StreamCommand", FakeStream([], FakeRpcError(grpc.StatusCode.NOT_FOUND, "no command c1"))),
            ("Execute", FakeStream([ev(1, "started"), ev(2, "done")])),
        ])
        ex = sb.run("code", command_id="c1").wait()
        self.assertEqual([e.seq for e in ex.events], [1, 2])
        self.assertEqual([c[0] for c in self.stub.calls], ["Execute", "StreamCommand", "Execute"])

    def test_not_found_after_events_is_raised_not_reexecuted(self):
        sb = self.sandbox([
            ("Execute", FakeStream([ev(1, "started")], unavailable())),
            ("StreamCommand", FakeStream([], FakeRpcError(grpc.StatusCode.NOT_FOUND, "output pruned"))),
        ])
        ex = sb.run("code", command_id="c1")
        with self.assertRaises(sandboxd.NotFound) as cm:
            ex.wait()
        self.assertEqual(cm.exception.message, "output pruned")
        self.assertEqual([e.seq for e in ex.events], [1])
        self.assertEqual([c[0] for c in self.stub.calls], ["Execute", "StreamCommand"])

    def test_other_errors_are_raised_at_once(self):
        sb = self.sandbox([
            ("Execute", FakeStream([], FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad language"))),
        ])
        with self.assertRaises(sandboxd.InvalidArgument):
            sb.run("code", language="cobol").wait()
        self.assertEqual(len(self.stub.calls), 1)

    def test_duplicates_are_dropped(self):
        sb = self.sandbox([
            ("Execute", FakeStream([ev(1, "started"), ev(2)], unavailable())),
            ("StreamCommand", FakeStream([ev(2), ev(3, "done")])),
        ])
        self.assertEqual([e.seq for e in sb.run("code", command_id="c1")], [1, 2, 3])

    def test_gives_up_after_resume_timeout_without_progress(self):
        script = [("Execute", FakeStream([ev(1, "started")], unavailable()))]
        script += [("StreamCommand", FakeStream([], unavailable())) for _ in range(1000)]
        sb = self.sandbox(script, resume_timeout=0.2)
        ex = sb.run("code", command_id="c1")
        with self.assertRaises(sandboxd.Unavailable) as cm:
            ex.wait()
        self.assertIn("c1", cm.exception.message)
        self.assertIn("after seq 1", cm.exception.message)
        self.assertEqual(self.stub.calls[0], ("Execute", "c1"))
        self.assertTrue(all(c == ("StreamCommand", 1) for c in self.stub.calls[1:]))
        self.assertLess(len(self.stub.calls), 100)

    def test_resume_follows_an_existing_command(self):
        sb = self.sandbox([("StreamCommand", FakeStream([ev(3), ev(4, "done")]))])
        ex = sb.resume("c1", after_seq=2).wait()
        self.assertEqual([e.seq for e in ex.events], [3, 4])
        self.assertEqual(self.stub.calls, [("StreamCommand", 2)])

    def test_resume_of_an_unknown_command_is_not_found(self):
        sb = self.sandbox([("StreamCommand", FakeStream([], FakeRpcError(grpc.StatusCode.NOT_FOUND, "no such command")))])
        with self.assertRaises(sandboxd.NotFound):
            sb.resume("c1").wait()

    def test_generated_command_ids_are_unique(self):
        sb = self.sandbox([("Execute", FakeStream([ev(1, "done")])), ("Execute", FakeStream([ev(1, "done")]))])
        a, b = sb.run("1"), sb.run("2")
        self.assertNotEqual(a.command_id, b.command_id)
        self.assertEqual([c[1] for c in self.stub.calls], [a.command_id, b.command_id])


if __name__ == "__main__":
    unittest.main()
